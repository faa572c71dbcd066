//! Read profiles: the first start of an image on a node notes which
//! blocks its reads used, and the next start's squashfs server decompresses
//! them ahead; a damaged profile is skipped and written afresh, and never
//! changes what a read returns.

use std::fs;
use std::path::PathBuf;

use crate::harness::*;

/// The sandbox's only keeper directory.
fn keeper_dir(sb: &Sandbox) -> PathBuf {
    let dirs: Vec<PathBuf> = fs::read_dir(sb.dir.path().join("run/berth/keepers"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .collect();
    assert_eq!(dirs.len(), 1, "{dirs:?}");
    dirs.into_iter().next().unwrap()
}

#[test]
#[cfg_attr(
    not(berth_it_env),
    ignore = "needs the test fixtures: sudo bash tests/setup/setup.sh"
)]
fn the_next_start_decompresses_ahead_what_the_last_one_read() {
    if fallbacks() {
        eprintln!("skipped: the fallbacks pass unpacks images (no squashfs server)");
        return;
    }
    let sb = Sandbox::new(env());
    let image = sb.debian();
    let script = "find /usr/lib/python3* -name '*.py' | sort | head -200 | xargs cat | sha256sum";
    let run = || {
        let out = sb.run(&["run", "--entrypoint", "", &image, "/bin/sh", "-c", script]);
        assert_eq!(out.code(), 0, "{}", out.stderr());
        // The keeper leaves a second after the run (BERTH_KEEPER_IDLE).
        sb.wait_keepers_gone();
        out.stdout()
    };
    let first = run();
    assert!(first.len() > 64, "{first}");
    let dir = keeper_dir(&sb);
    let log = || fs::read_to_string(dir.join("keeper.log")).unwrap_or_default();
    let profiles: Vec<PathBuf> = fs::read_dir(sb.dir.path().join("run/berth/profiles"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .collect();
    let [profile] = &profiles[..] else {
        panic!("one profile for the one image: {profiles:?}");
    };
    assert!(
        fs::metadata(profile).unwrap().len() > 100,
        "a profile of a few blocks at least: {}",
        log()
    );
    assert!(
        !log().contains("ahead"),
        "nothing to decompress ahead at first: {}",
        log()
    );

    // The next start decompresses what the first read ahead, and the
    // files read the same.
    assert_eq!(run(), first);
    let ahead = log();
    let line = ahead
        .lines()
        .find(|l| l.contains("blocks ahead"))
        .unwrap_or_else(|| panic!("no prefetch: {ahead}"));
    assert!(
        !line.starts_with("berth-squashfs: decompressed 0 "),
        "{line}"
    );

    // A damaged profile is not used (no read goes wrong), and is written
    // afresh.
    let mut bytes = fs::read(profile).unwrap();
    bytes[20] ^= 0xff;
    fs::write(profile, &bytes).unwrap();
    assert_eq!(run(), first);
    assert!(log().contains("damaged"), "{}", log());
    assert!(!log().contains("blocks ahead"), "{}", log());
    assert_ne!(fs::read(profile).unwrap(), bytes, "written afresh");
    assert_eq!(run(), first);
    assert!(log().contains("blocks ahead"), "{}", log());
}
