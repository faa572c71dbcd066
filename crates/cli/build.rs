//! Declares what the end-to-end tests (`tests/it`) can use on this machine,
//! so that a test that cannot run is listed by cargo as *ignored*, never
//! passed without running (see the rule at the top of
//! `tests/it/harness.rs`):
//!
//! - `berth_it_env`: the fixture environment exists (`$BERTH_IT_DIR/env`,
//!   default `/tmp/berth-it/env`, written by `tests/setup/setup.sh`);
//! - `berth_it_root`: that, and the tests are built (so run) as root;
//! - `berth_it_slurm`: `berth_it_root`, and berth's SPANK plugin is
//!   installed in the test Slurm (`tests/setup/slurm_plugin.sh`).
//!
//! Under `CI` or `BERTH_IT_REQUIRED` all three are set whatever the machine
//! has: the tests then run, and fail where their fixture is missing.
//!
//! A file that exists is watched (`rerun-if-changed`); a missing one is
//! not, since cargo would then rebuild this package at every command. A
//! fixture that appears after the tests were built is caught by the test
//! `harness::the_declared_skips_match_this_machine`.

use std::path::{Path, PathBuf};

fn main() {
    for cfg in ["berth_it_env", "berth_it_root", "berth_it_slurm"] {
        println!("cargo::rustc-check-cfg=cfg({cfg})");
    }
    for var in ["BERTH_IT_DIR", "CI", "BERTH_IT_REQUIRED"] {
        println!("cargo::rerun-if-env-changed={var}");
    }
    println!("cargo::rerun-if-changed=build.rs");

    let dir =
        PathBuf::from(std::env::var_os("BERTH_IT_DIR").unwrap_or_else(|| "/tmp/berth-it".into()));
    let required =
        std::env::var_os("CI").is_some() || std::env::var_os("BERTH_IT_REQUIRED").is_some();
    let has_env = watched(&dir.join("env"));
    let has_plugin = watched(&dir.join("slurm/plugin/libberth_spank.so"));

    let env = required || has_env;
    let root = required || (has_env && built_as_root());
    let slurm = required || (root && has_plugin);
    for (cfg, on) in [
        ("berth_it_env", env),
        ("berth_it_root", root),
        ("berth_it_slurm", slurm),
    ] {
        if on {
            println!("cargo::rustc-cfg={cfg}");
        }
    }
}

/// Whether `file` exists; watched for changes when it does.
fn watched(file: &Path) -> bool {
    let exists = file.exists();
    if exists {
        println!("cargo::rerun-if-changed={}", file.display());
    }
    exists
}

/// Whether this build runs with effective user id 0 (`Uid:` in
/// `/proc/self/status`: real, effective, saved, filesystem).
fn built_as_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .and_then(|ids| ids.split_whitespace().nth(1).map(|e| e == "0"))
        })
        .unwrap_or(false)
}
