//! Load: 64 `berth run` of one image at once and many in a row, by one
//! user; afterwards no leaked process, mount, descriptor or temporary
//! file. `BERTH_RELIABILITY_RUNS` sets the sequential runs (200 here; the
//! reliability run uses 1,000).

use std::fs;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::harness::Sandbox;
use crate::need_env;
use crate::reliability_crash::scale;

fn fd_count(pid: i32) -> usize {
    fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| d.count())
        .unwrap_or(0)
}

#[test]
#[cfg_attr(
    not(berth_it_env),
    ignore = "needs the test fixtures: sudo bash tests/setup/setup.sh"
)]
fn many_runs_at_once_and_in_a_row_leak_nothing() {
    let env = need_env!();
    let mut sb = Sandbox::new(env);
    // A keeper that stays for the whole test (its descriptors are counted
    // between runs), then leaves quickly.
    sb.extra_env.push(("BERTH_KEEPER_IDLE".into(), "3".into()));
    sb.pull("debian-python:latest");
    let img = format!("{}/berth-test/debian-python:latest", env.anon());
    let mounts_before = fs::read_to_string("/proc/self/mountinfo").unwrap();
    let t = Instant::now();
    let tasks: Vec<_> = (0..64)
        .map(|_| {
            sb.berth(&["run", &img, "true"])
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for task in tasks {
        let o = task.wait_with_output().unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }
    eprintln!("64 runs at once: {:?}", t.elapsed());
    let keeper = sb.keeper_pid().expect("a keeper serves the runs");
    let fds_before = fd_count(keeper);
    let runs = scale("BERTH_RELIABILITY_RUNS", 200);
    let t = Instant::now();
    for i in 0..runs {
        let out = sb.run(&["run", &img, "true"]);
        assert_eq!(out.code(), 0, "run {i}: {}", out.stderr());
    }
    eprintln!("{runs} runs in a row: {:?}", t.elapsed());
    assert_eq!(sb.keeper_pid(), Some(keeper), "one keeper throughout");
    assert_eq!(
        fd_count(keeper),
        fds_before,
        "the keeper's descriptors grew"
    );
    // Idle keepers leave: nothing of the sandbox runs, nothing is mounted
    // in the host's namespace, nothing is left in the state directory but
    // berth's own small records.
    let deadline = Instant::now() + Duration::from_secs(15);
    while !sb.processes().is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(
        sb.processes().is_empty(),
        "left running: {:?}",
        sb.processes()
    );
    let sandbox = sb.dir.path().to_string_lossy().into_owned();
    let mounts_after = fs::read_to_string("/proc/self/mountinfo").unwrap();
    let new: Vec<&str> = mounts_after
        .lines()
        .filter(|l| l.contains(&sandbox) && !mounts_before.contains(*l))
        .collect();
    assert!(new.is_empty(), "mounts left: {new:?}");
    let bundles = sb.dir.path().join("run/berth/bundles");
    assert!(
        fs::read_dir(&bundles).map(|d| d.count()).unwrap_or(0) == 0,
        "hook bundles left in {}",
        bundles.display()
    );
    sb.assert_store_tmp_empty();
    let keepers = sb.dir.path().join("run/berth/keepers");
    for k in fs::read_dir(&keepers).into_iter().flatten().flatten() {
        let mnt = k.path().join("mnt");
        let left: Vec<_> = fs::read_dir(&mnt)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.file_name())
            .collect();
        assert!(
            left.is_empty() || !Path::new(&mnt).exists(),
            "keeper mount points left: {left:?}"
        );
    }
}
