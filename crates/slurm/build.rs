//! The SPANK plugin's `plugin_version` must be the running Slurm's
//! (major.minor are compared at load). It comes from, in order:
//! `BERTH_SLURM_VERSION` (e.g. 23.11.4), the installed `slurm_version.h`,
//! `slurmd -V` or `srun --version`; without any of these the plugin is built for the
//! version the slurm-spank crate's bindings were made from, with a warning.

use std::process::Command;

fn parse(v: &str) -> Option<u32> {
    let mut it = v.trim().split(['.', '-']).map(|p| p.parse::<u32>().ok());
    let (major, minor) = (it.next()??, it.next()??);
    let micro = it.next().flatten().unwrap_or(0);
    Some((major << 16) | (minor << 8) | micro)
}

fn detect() -> Option<(u32, String)> {
    println!("cargo:rerun-if-env-changed=BERTH_SLURM_VERSION");
    if let Ok(v) = std::env::var("BERTH_SLURM_VERSION") {
        return parse(&v).map(|n| (n, format!("BERTH_SLURM_VERSION={v}")));
    }
    for header in [
        "/usr/include/slurm/slurm_version.h",
        "/usr/local/include/slurm/slurm_version.h",
    ] {
        println!("cargo:rerun-if-changed={header}");
        if let Ok(text) = std::fs::read_to_string(header) {
            let n = text.lines().find_map(|l| {
                let rest = l.strip_prefix("#define SLURM_VERSION_NUMBER")?;
                let rest = rest.trim();
                u32::from_str_radix(rest.trim_start_matches("0x"), 16).ok()
            });
            if let Some(n) = n {
                return Some((n, header.to_string()));
            }
        }
    }
    // "slurm 22.05.8" or "slurm-wlm 22.05.8"; srun needs a configuration
    // to answer, slurmd -V does not.
    for (prog, arg) in [
        ("slurmd", "-V"),
        ("srun", "--version"),
        ("sinfo", "--version"),
    ] {
        let Ok(out) = Command::new(prog).arg(arg).output() else {
            continue;
        };
        let text = String::from_utf8_lossy(&out.stdout);
        if let Some(n) = text.split_whitespace().nth(1).and_then(parse) {
            return Some((n, format!("{prog} {arg} ({})", text.trim())));
        }
    }
    None
}

fn main() {
    match detect() {
        Some((n, from)) => {
            println!("cargo:rustc-env=BERTH_SLURM_VERSION_NUMBER={n}");
            println!("cargo:rustc-env=BERTH_SLURM_VERSION_FROM={from}");
        }
        None => {
            println!("cargo:warning=berth-slurm: no Slurm found (no BERTH_SLURM_VERSION, slurm_version.h or srun); the plugin is built for the slurm-spank crate's version and will only load on that Slurm");
            println!("cargo:rustc-env=BERTH_SLURM_VERSION_NUMBER=0");
            println!("cargo:rustc-env=BERTH_SLURM_VERSION_FROM=none");
        }
    }
}
