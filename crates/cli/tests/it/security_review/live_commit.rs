//! A live commit (`berth commit KEY` of a running shared container) reads
//! the container's changes while the container may still change them.

use std::fs;
use std::process::Stdio;

use crate::harness::{wait_ready, Sandbox};
use crate::need_env;

/// 200 files of the user's that a commit must never save (`bait/f*`,
/// "host"), and where the file that stops an attack goes.
fn bait(sb: &Sandbox) -> (std::path::PathBuf, std::path::PathBuf) {
    let (bait, stop) = (sb.home().join("bait"), sb.home().join("stop"));
    fs::create_dir_all(&bait).unwrap();
    for i in 0..200 {
        fs::write(bait.join(format!("f{i}")), "host\n").unwrap();
    }
    sb.chown_to_user(&bait);
    (bait, stop)
}

/// How many of the bait files' lines (`host`) regular files at `paths`
/// of the saved image `saved` hold, read in a container without the home
/// (a saved symlink into the home would otherwise show the live bait).
fn baits_in(sb: &Sandbox, saved: &str, paths: &str) -> u32 {
    let count = format!("find {paths} -type f -exec cat {{}} + 2>/dev/null | grep -c host; true");
    let shown = sb.run(&[
        "run",
        "--no-home",
        "--entrypoint",
        "",
        saved,
        "sh",
        "-c",
        &count,
    ]);
    shown.ok().stdout().trim().parse().unwrap_or(0)
}

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
    let (bait, stop) = bait(&sb);
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
    let mut saves = 0;
    for _ in 0..3 {
        let _ = std::fs::remove_file(saved);
        // The commit may also refuse an entry whose kind changed under it;
        // either way nothing of the user's is saved.
        let out = sb.run(&["commit", "kswap", saved]);
        if out.code() != 0 {
            assert!(!std::path::Path::new(saved).exists(), "{}", out.stderr());
            continue;
        }
        assert_eq!(
            baits_in(&sb, saved, "/d /s"),
            0,
            "the user's files were saved"
        );
        saves += 1;
    }
    fs::write(&stop, "").unwrap();
    assert!(task.wait().unwrap().success());
    assert!(saves > 0, "no commit succeeded");
}

/// A named container's layer lies in the store, where another container
/// of the user's that has the store bound can reach it while a commit
/// reads it: it moves a directory out of the layer and back, again and
/// again, and exchanges a directory deep below it with a symlink whose
/// `..`s climb to the user's files. A walk that stands in the moved
/// directory when it meets that symlink leaves a plain chroot; the
/// commit's walk has a bind mount of the layer as its root, out of which
/// the kernel lets no `..` climb: none of the user's files is saved.
#[test]
#[cfg_attr(
    not(berth_it_env),
    ignore = "needs the test fixtures: sudo bash tests/setup/setup.sh"
)]
fn a_commit_never_saves_the_users_files_through_a_directory_moved_out_of_the_layer() {
    let env = need_env!();
    let sb = Sandbox::new(env);
    let d = sb.debian();
    let (bait, stop) = bait(&sb);
    // Deep below the moved directory, so that a walk spends long enough
    // in it for the move to land between its steps.
    let deep: String = (1..=150).map(|i| format!("/n{i}")).collect();
    let climb = format!(
        "{}{}",
        "../".repeat(400),
        bait.display().to_string().trim_start_matches('/')
    );
    let make = format!(
        "mkdir -p /d{deep}/e && for i in $(seq 0 199); do echo x > /d{deep}/e/f$i; done && ln -s {climb} /d{deep}/s"
    );
    sb.sh(&d, &["--name", "nswap"], &make).ok();
    let store = sb.store();
    let store = store.to_str().unwrap();
    let upper = format!("{store}/containers/nswap/upper");
    let away = format!("{store}/away");
    fs::create_dir_all(&away).unwrap();
    sb.chown_to_user(std::path::Path::new(&away));
    // The other container: moves /d out and back, exchanges e and s.
    let attack = "import ctypes, os, sys, time\n\
                  libc = ctypes.CDLL(None, use_errno=True)\n\
                  upper, away, stop, deep = sys.argv[1:5]\n\
                  d, gone = upper + '/d', away + '/d'\n\
                  e, s = (d + deep + '/e').encode(), (d + deep + '/s').encode()\n\
                  print('ready', flush=True)\n\
                  end = time.time() + 60\n\
                  while not os.path.exists(stop) and time.time() < end:\n    \
                      libc.renameat2(-100, e, -100, s, 2)\n    \
                      os.rename(d, gone)\n    \
                      os.rename(gone, d)\n    \
                      libc.renameat2(-100, e, -100, s, 2)\n";
    let bind = format!("{store}:{store}");
    let stop_s = stop.display().to_string();
    let args = [
        "run",
        "--entrypoint",
        "",
        "-v",
        &bind,
        d.as_str(),
        "python3",
        "-c",
        attack,
        &upper,
        &away,
        &stop_s,
        &deep,
    ];
    let mut other = sb.berth(&args).stdout(Stdio::piped()).spawn().unwrap();
    let _ready = wait_ready(&mut other);
    let saved = sb.dir.path().join("moved.sqsh");
    let saved = saved.to_str().unwrap();
    let (mut leaked, mut saves) = (0, 0);
    // The race is narrow: as many commits as 20 s allow.
    let until = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while std::time::Instant::now() < until {
        let _ = std::fs::remove_file(saved);
        // The commit may also refuse an entry that changed under it.
        let out = sb.run(&["commit", "nswap", saved]);
        if out.code() != 0 {
            assert!(!std::path::Path::new(saved).exists(), "{}", out.stderr());
            continue;
        }
        saves += 1;
        leaked += baits_in(&sb, saved, "/d");
    }
    fs::write(&stop, "").unwrap();
    assert!(other.wait().unwrap().success());
    eprintln!("{saves} commits, {leaked} of the user's files saved");
    assert_eq!(leaked, 0, "the user's files were saved");
    assert!(saves > 0, "no commit succeeded");
}

/// The same other container replaces the named container's layer
/// directory in the store by a symlink to the user's files, before the
/// commit: the commit opens the layer inside the store, where no symlink
/// leads out, so it saves none of them (it finds no layer).
#[test]
#[cfg_attr(
    not(berth_it_env),
    ignore = "needs the test fixtures: sudo bash tests/setup/setup.sh"
)]
fn a_commit_never_saves_the_users_files_through_a_layer_replaced_by_a_symlink() {
    let env = need_env!();
    let sb = Sandbox::new(env);
    let d = sb.debian();
    let (bait, _) = bait(&sb);
    sb.sh(&d, &["--name", "nlink"], "echo mine > /mine").ok();
    let upper = sb.store().join("containers/nlink/upper");
    let away = sb.store().join("containers/nlink/upper.away");
    fs::rename(&upper, &away).unwrap();
    std::os::unix::fs::symlink(&bait, &upper).unwrap();
    let saved = sb.dir.path().join("link.sqsh");
    let out = sb.run(&["commit", "nlink", saved.to_str().unwrap()]);
    if out.code() == 0 {
        let saved = saved.to_str().unwrap();
        assert_eq!(
            baits_in(&sb, saved, "/f*"),
            0,
            "the user's files were saved"
        );
    } else {
        assert!(
            out.stderr().contains("cannot open its changes"),
            "{}",
            out.stderr()
        );
    }
}
