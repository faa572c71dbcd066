//! A live commit (`berth commit KEY` of a running shared container) reads
//! the container's changes while the container may still change them.

use std::fs;
use std::process::Stdio;

use crate::harness::{wait_ready, Sandbox};
use crate::need_env;

/// A directory of the container's layer exchanged, again and again while
/// the commit reads it, with a symlink to the user's files
/// (`renameat2(RENAME_EXCHANGE)`): the save's worker sees the host's
/// files with the user's ids and follows a path's middle parts, so before
/// the fix about 90 of the 200 files saved were the user's. Now the
/// changes are read confined to their own directory: none is.
#[test]
#[cfg_attr(
    not(berth_it_env),
    ignore = "needs the test fixtures: sudo bash tests/setup/setup.sh"
)]
fn a_live_commit_never_saves_the_users_files_through_a_swapped_directory() {
    let env = need_env!();
    let sb = Sandbox::new(env);
    let d = sb.debian();
    let (bait, stop) = (sb.home().join("bait"), sb.home().join("stop"));
    fs::create_dir_all(&bait).unwrap();
    for i in 0..200 {
        fs::write(bait.join(format!("f{i}")), "host\n").unwrap();
    }
    sb.chown_to_user(&bait);
    // Until told to stop, and 60 s at most (a failed test stops nothing).
    let swap = "import ctypes, os, sys, time\n\
                libc = ctypes.CDLL(None, use_errno=True)\n\
                end = time.time() + 60\n\
                while not os.path.exists(sys.argv[1]) and time.time() < end:\n    \
                    if libc.renameat2(-100, b'/d', -100, b'/s', 2) != 0:\n        \
                        raise OSError(ctypes.get_errno(), 'renameat2')\n";
    let script = format!(
        "mkdir /d && for i in $(seq 0 199); do head -c 65536 /dev/zero > /d/f$i; done && \
         ln -s {bait} /s && echo ready && exec python3 -c \"$SWAP\" {stop}",
        stop = stop.display(),
        bait = bait.display()
    );
    let args = ["run", "--shared", "kswap", "--writable", "--entrypoint", ""];
    let mut args: Vec<&str> = args.to_vec();
    let env_swap = format!("SWAP={swap}");
    args.extend(["-e", env_swap.as_str(), d.as_str(), "sh", "-c", &script]);
    let mut task = sb.berth(&args).stdout(Stdio::piped()).spawn().unwrap();
    let _ready = wait_ready(&mut task);
    let saved = sb.dir.path().join("swap.sqsh");
    let saved = saved.to_str().unwrap();
    // Regular files only, the home not bound: a saved symlink into the
    // home would otherwise show the live bait.
    let count = "find /d /s -type f -exec cat {} + 2>/dev/null | grep -c host; true";
    for _ in 0..3 {
        let _ = std::fs::remove_file(saved);
        // The commit may also refuse an entry whose kind changed under it;
        // either way nothing of the user's is saved.
        let out = sb.run(&["commit", "kswap", saved]);
        if out.code() != 0 {
            assert!(!std::path::Path::new(saved).exists(), "{}", out.stderr());
            continue;
        }
        let shown = sb.run(&[
            "run",
            "--no-home",
            "--entrypoint",
            "",
            saved,
            "sh",
            "-c",
            count,
        ]);
        assert_eq!(
            shown.ok().stdout().trim(),
            "0",
            "the user's files were saved"
        );
    }
    fs::write(&stop, "").unwrap();
    assert!(task.wait().unwrap().success());
}
