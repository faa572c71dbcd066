//! `berth __squashfs fd:IMAGE fd:FUSE [OFFSET] [--verity ROOT]
//! [--profile fd:PROFILE MILLISECONDS]`: the server process the keeper
//! starts on a connection it mounted. With `--verity`, every read is
//! checked against the image file's verity table (see [`crate::verity`]).
//! With `--profile`, a thread decompresses the blocks of the image's read
//! profile on this node (see [`crate::reader::profile`]) while the first
//! requests come, and the blocks this start's reads use in the first
//! milliseconds given are written over it.

use std::fs::File;
use std::io::Read;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::fuse::{self, dev, Fs};
use crate::reader::profile::{self, Recorder};
use crate::reader::Image;
use crate::signals;

/// The server process's main; its exit code.
pub fn serve_main(args: &[String]) -> i32 {
    match run(args) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("berth-squashfs: error: {e}");
            1
        }
    }
}

fn fd_arg(s: &str) -> Result<i32, String> {
    s.strip_prefix("fd:")
        .and_then(|n| n.parse().ok())
        .ok_or_else(|| format!("{s:?} is not fd:N"))
}

/// The server's arguments.
#[derive(Debug, Default)]
struct Args {
    image: i32,
    conn: i32,
    offset: u64,
    verity: Option<String>,
    /// The image's read profile on this node, and how long to note this
    /// start's reads for it.
    profile: Option<(i32, Duration)>,
}

const USAGE: &str = "usage: berth __squashfs fd:IMAGE fd:FUSE [OFFSET] [--verity ROOT] \\
                     [--profile fd:PROFILE MILLISECONDS]";

fn parse(args: &[String]) -> Result<Args, String> {
    let positional = args.iter().take_while(|a| !a.starts_with("--")).count();
    let mut a = match &args[..positional] {
        [i, c] => Args {
            image: fd_arg(i)?,
            conn: fd_arg(c)?,
            ..Args::default()
        },
        [i, c, o] => Args {
            image: fd_arg(i)?,
            conn: fd_arg(c)?,
            offset: o.parse().map_err(|_| format!("bad offset {o:?}"))?,
            ..Args::default()
        },
        _ => return Err(USAGE.into()),
    };
    let mut rest = args[positional..].iter();
    while let Some(flag) = rest.next() {
        let mut value = || {
            rest.next()
                .ok_or_else(|| format!("{flag} needs a value; {USAGE}"))
        };
        match flag.as_str() {
            "--verity" => a.verity = Some(value()?.clone()),
            "--profile" => {
                let fd = fd_arg(value()?)?;
                let ms = value()?;
                let ms = ms.parse().map_err(|_| format!("bad window {ms:?}"))?;
                a.profile = Some((fd, Duration::from_millis(ms)));
            }
            _ => return Err(format!("unknown argument {flag:?}; {USAGE}")),
        }
    }
    Ok(a)
}

fn run(args: &[String]) -> Result<(), String> {
    // Started through /proc/self/fd/N: named by that number otherwise.
    let _ = rustix::thread::set_name(c"berth-squashfs");
    no_new_privs();
    let args = parse(args)?;
    let image = dev::take_fd(args.image).map_err(|e| format!("the image descriptor: {e}"))?;
    let conn = dev::take_fd(args.conn).map_err(|e| format!("the FUSE descriptor: {e}"))?;
    let mut image = match &args.verity {
        Some(root) => Image::open_verified(File::from(image), args.offset, root),
        None => Image::open(File::from(image), args.offset),
    }
    .map_err(|e| e.to_string())?;
    let (last, writer) = match args.profile {
        Some((fd, window)) => {
            let file =
                File::from(dev::take_fd(fd).map_err(|e| format!("the profile descriptor: {e}"))?);
            let last = read_profile(&file);
            let budget = image.profile_budget();
            let recorder = Arc::new(Recorder::new(window, budget));
            image.record_into(recorder.clone());
            let writer = ProfileWriter {
                recorder,
                last: last.clone().unwrap_or_default(),
                budget,
                out: Mutex::new(Some(file)),
            };
            (last, Some(Arc::new(writer)))
        }
        None => (None, None),
    };
    let threads = std::env::var("BERTH_SQUASHFS_THREADS")
        .ok()
        .and_then(|t| t.parse().ok())
        .unwrap_or_else(|| {
            std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(2)
                .clamp(2, 8)
        });
    let fs = Arc::new(Fs::new(image));
    // Every thread from here on leaves SIGTERM to the one that writes the
    // profile noted so far, then ends the server. The helper threads are
    // extras: where one cannot start, the server serves without it.
    signals::block_term();
    if let Some(blocks) = last {
        let fs = fs.clone();
        let _ = std::thread::Builder::new().spawn(move || {
            // Only what the CPUs have to spare: on a busy node the reads
            // decompress what they need themselves, as without a profile.
            let _ = rustix::process::setpriority_process(Some(rustix::thread::gettid()), 19);
            let started = Instant::now();
            let done = fs.image().prefetch(&blocks);
            eprintln!(
                "berth-squashfs: decompressed {done} of the last start's {} blocks ahead in {} ms",
                blocks.len(),
                started.elapsed().as_millis()
            );
        });
    }
    if let Some(w) = &writer {
        let w = w.clone();
        let _ = std::thread::Builder::new().spawn(move || w.keep_written());
    }
    let on_term = writer.clone();
    let waiting = std::thread::Builder::new().spawn(move || {
        signals::wait_term();
        if let Some(w) = on_term {
            w.write(true);
        }
        std::process::exit(0);
    });
    if waiting.is_err() {
        signals::unblock_term();
    }
    let served = fuse::serve(fs, conn, threads).map_err(|e| format!("serving the image: {e}"));
    if let Some(w) = writer {
        w.write(true);
    }
    served
}

/// The blocks of the profile in `file`; None when it has none (new, or
/// damaged: then it is written afresh).
fn read_profile(file: &File) -> Option<Vec<profile::Block>> {
    let mut bytes = Vec::new();
    let read = file
        .take(profile::MAX_BYTES as u64 + 1)
        .read_to_end(&mut bytes);
    let blocks = read.ok().and_then(|_| profile::decode(&bytes));
    if blocks.is_none() && !bytes.is_empty() {
        eprintln!("berth-squashfs: the image's read profile is damaged: it is written afresh");
    }
    blocks.filter(|b| !b.is_empty())
}

/// Writes the image's read profile after this start (what it read, then
/// what the last profile named besides, see [`profile::merge`]): as it
/// grows, every [`SNAPSHOT`] while its window is open (a job's end may
/// kill the server without warning), and once more when the window closes
/// or the server is stopped or unmounted.
struct ProfileWriter {
    recorder: Arc<Recorder>,
    /// The last profile's blocks.
    last: Vec<profile::Block>,
    budget: profile::Budget,
    out: Mutex<Option<File>>,
}

/// How often a growing profile is written while its window is open.
const SNAPSHOT: Duration = Duration::from_millis(50);

impl ProfileWriter {
    /// Writes the profile as it grows until the window closes.
    fn keep_written(&self) {
        let until = self.recorder.until();
        let mut written = 0;
        while Instant::now() < until {
            std::thread::sleep(SNAPSHOT.min(until.saturating_duration_since(Instant::now())));
            let n = self.recorder.len();
            if n != written {
                self.write(false);
                written = n;
            }
        }
        self.write(true);
    }

    /// Writes what is noted so far; `last`: noting stops, and this is the
    /// last write. The file's lock is taken first, so that of two last
    /// writes the one that takes what was noted is the one that writes it.
    fn write(&self, last: bool) {
        let mut out = self.out.lock().unwrap_or_else(|p| p.into_inner());
        let Some(f) = out.as_ref() else {
            return;
        };
        let noted = if last {
            self.recorder.take()
        } else {
            self.recorder.noted()
        };
        if !noted.is_empty() {
            let blocks = profile::merge(&noted, &self.last, self.budget);
            let bytes = profile::encode(&blocks);
            let wrote = rustix::io::pwrite(f, &bytes, 0)
                .map_err(std::io::Error::from)
                .and_then(|n| f.set_len(n as u64));
            if let Err(e) = wrote {
                eprintln!("berth-squashfs: cannot write the image's read profile: {e}");
            } else if last {
                eprintln!(
                    "berth-squashfs: the image's read profile names {} blocks ({} read by this start)",
                    blocks.len(),
                    noted.len()
                );
            }
        }
        if last {
            *out = None;
        }
    }
}

/// It never executes anything: nothing it could execute gains privileges.
/// (The runtime's kernel seam is for containers; this process has no
/// container and no fake to test against.)
#[allow(clippy::disallowed_methods)]
fn no_new_privs() {
    let _ = rustix::thread::set_no_new_privs(true);
}
