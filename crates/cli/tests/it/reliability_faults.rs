//! Pulls through a FAULT-INJECTING proxy (tests/setup/faultproxy.py, a
//! fake named so) in front of the real test registry: transient faults end
//! in the same image as a clean pull; permanent ones in a clear error with
//! the class's exit code; never a wrong or partial image in the store.

use std::fs;
use std::path::Path;
use std::time::Instant;

use crate::harness::Sandbox;
use crate::harness_proxy::{store, Proxy};
use crate::need_env;

/// Quick retries and a 2 s stall limit, so the suite does not wait out
/// production time-outs.
fn fast_network(sb: &Sandbox) {
    let conf = sb.home().join(".config/berth");
    fs::create_dir_all(&conf).unwrap();
    fs::write(
        conf.join("berth.toml"),
        "[network]\nattempts = 4\nbackoff_ms = 50\nconnect_timeout_seconds = 5\nread_timeout_seconds = 2\n",
    )
    .unwrap();
    sb.chown_to_user(&sb.home());
}

fn entries(store: &str, sub: &str) -> usize {
    fs::read_dir(Path::new(store).join(sub))
        .map(|d| d.count())
        .unwrap_or(0)
}

#[test]
#[cfg_attr(
    not(berth_it_env),
    ignore = "needs the test fixtures: sudo bash tests/setup/setup.sh"
)]
fn transient_faults_end_in_the_same_image() {
    let env = need_env!();
    let sb = Sandbox::new(env);
    fast_network(&sb);
    let clean = store(&sb, "clean");
    let direct = format!("{}/berth-test/layers:latest", env.anon());
    let want = sb
        .run(&[
            "--store",
            &clean,
            "pull",
            "-q",
            "--tls-verify=false",
            &direct,
        ])
        .ok()
        .stdout();
    for (fault, count) in [
        ("status500", 2),
        ("status503", 2),
        ("reset", 2),
        ("truncate", 1),
        ("stall", 1),
        ("auth401", 1),
    ] {
        let proxy = Proxy::start(&sb, fault, count);
        let s = store(&sb, fault);
        let started = Instant::now();
        let out = sb.run(&[
            "--store",
            &s,
            "pull",
            "-q",
            "--tls-verify=false",
            &proxy.image("layers"),
        ]);
        assert_eq!(out.code(), 0, "{fault}: {}", out.stderr());
        assert_eq!(out.stdout(), want, "{fault}: another image");
        assert!(proxy.fired() >= 1, "{fault}: the proxy injected nothing");
        sb.run(&["--store", &s, "check"]).ok();
        assert_eq!(entries(&s, "tmp"), 0, "{fault}: leftovers");
        eprintln!("{fault} x{count}: recovered in {:?}", started.elapsed());
    }
}

#[test]
#[cfg_attr(
    not(berth_it_env),
    ignore = "needs the test fixtures: sudo bash tests/setup/setup.sh"
)]
fn permanent_faults_fail_clearly_and_leave_nothing() {
    let env = need_env!();
    let sb = Sandbox::new(env);
    fast_network(&sb);
    for (fault, code, says) in [
        ("corrupt", 13, "digest"),
        ("truncate", 12, "gave up after 4 attempts"),
        ("status500", 12, "gave up after 4 attempts"),
    ] {
        let proxy = Proxy::start(&sb, fault, 0);
        let s = store(&sb, &format!("{fault}-always"));
        let out = sb.run(&[
            "--store",
            &s,
            "pull",
            "--tls-verify=false",
            &proxy.image("layers"),
        ]);
        assert_eq!(out.code(), code, "{fault}: {}", out.stderr());
        assert!(out.stderr().contains(says), "{fault}: {}", out.stderr());
        assert!(
            !out.stderr().contains("panicked"),
            "{fault}: {}",
            out.stderr()
        );
        assert_eq!(entries(&s, "images"), 0, "{fault}: an image was stored");
        assert_eq!(entries(&s, "tmp"), 0, "{fault}: leftovers");
        // The store is still usable.
        let direct = format!("{}/berth-test/layers:latest", env.anon());
        sb.run(&["--store", &s, "pull", "-q", "--tls-verify=false", &direct])
            .ok();
        sb.run(&["--store", &s, "check"]).ok();
    }
}
