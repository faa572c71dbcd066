//! `latencyfs SOURCE MOUNTPOINT [--delay-us N] [--max-concurrent K] [--threads T] [--stats FILE]`
//!
//! A passthrough FUSE filesystem that models a parallel filesystem's
//! metadata server for the Pynamic-style start-up study (see
//! docs/benchmarks.md): every metadata request (lookup, getattr, open,
//! opendir, readdir, readlink, statfs) sleeps `--delay-us`, at most
//! `--max-concurrent` of them are served at once (0: unlimited; 1: a
//! saturated, serialised server), and each is counted by type. Data reads
//! pass through without delay.
//!
//! Fairness (measured, see ../shared/notes): names and attributes are not
//! cached by the kernel (zero TTLs), so every lookup reaches the "server";
//! opens keep the page cache and automatic data invalidation stays off, so
//! reading a large image file is not charged as metadata traffic.
//!
//! Counters are written as JSON to `--stats` every 100 ms.

#![forbid(unsafe_code)]

mod fs;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

fn usage() -> ExitCode {
    eprintln!(
        "usage: latencyfs SOURCE MOUNTPOINT [--delay-us N] [--max-concurrent K] [--threads T] [--stats FILE]"
    );
    ExitCode::from(2)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut positional = Vec::new();
    let mut opts = fs::Options {
        delay: Duration::ZERO,
        max_concurrent: 0,
    };
    let mut threads = 16usize;
    let mut stats: Option<PathBuf> = None;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut value = |name: &str| -> Option<String> {
            let v = it.next().cloned();
            if v.is_none() {
                eprintln!("latencyfs: {name} needs a value");
            }
            v
        };
        match a.as_str() {
            "--delay-us" => match value(a).and_then(|v| v.parse::<u64>().ok()) {
                Some(us) => opts.delay = Duration::from_micros(us),
                None => return usage(),
            },
            "--max-concurrent" => match value(a).and_then(|v| v.parse().ok()) {
                Some(k) => opts.max_concurrent = k,
                None => return usage(),
            },
            "--threads" => match value(a).and_then(|v| v.parse().ok()) {
                Some(t) => threads = t,
                None => return usage(),
            },
            "--stats" => match value(a) {
                Some(p) => stats = Some(PathBuf::from(p)),
                None => return usage(),
            },
            "-h" | "--help" => return usage(),
            other if other.starts_with('-') => return usage(),
            other => positional.push(PathBuf::from(other)),
        }
    }
    let [source, mountpoint] = positional.as_slice() else {
        return usage();
    };
    match fs::serve(source, mountpoint, opts, threads, stats) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("latencyfs: {e}");
            ExitCode::from(1)
        }
    }
}
