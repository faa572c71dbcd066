//! Per-node shared containers without Slurm: `berth run --shared KEY`
//! (tasks join one container), `berth exec`, `berth ps`, and the
//! container's end with its last task.

use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::harness::{outputs, wait_ready, Sandbox};
use crate::need_env;

fn ps(sb: &Sandbox) -> Vec<String> {
    sb.run(&["ps", "-q"])
        .ok()
        .stdout()
        .lines()
        .map(str::to_string)
        .collect()
}

fn wait_gone(sb: &Sandbox, key: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while ps(sb).iter().any(|k| k == key) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(!ps(sb).iter().any(|k| k == key), "{key} still listed");
}

#[test]
#[cfg_attr(
    not(berth_it_env),
    ignore = "needs the test fixtures: sudo bash tests/setup/setup.sh"
)]
fn sixty_four_tasks_at_once_join_one_container_and_it_goes_away() {
    let env = need_env!();
    let sb = Sandbox::new(env);
    let d = sb.debian();
    let script = "echo $(readlink /proc/self/ns/mnt) $(readlink /proc/self/ns/user) $(id -u)";
    let tasks = sb.spawn_berths(64, |_| {
        [
            "run",
            "--shared",
            "k64",
            "--entrypoint",
            "",
            &d,
            "sh",
            "-c",
            script,
        ]
        .map(String::from)
        .to_vec()
    });
    let mut seen: Vec<String> = outputs(tasks)
        .into_iter()
        .map(|o| o.ok().stdout().trim().to_string())
        .collect();
    seen.dedup();
    // Whether the tasks overlapped or not, every one ran in a container of
    // the key; those that overlapped share it. Mostly they overlap: at
    // most a few containers for 64 tasks.
    let uid = sb.env.user.as_ref().map(|u| u.0).unwrap_or(0);
    assert!(
        seen.iter().all(|l| l.ends_with(&format!(" {uid}"))),
        "{seen:?}"
    );
    assert!(
        seen.len() <= 8,
        "{} containers for 64 tasks: {seen:?}",
        seen.len()
    );
    wait_gone(&sb, "k64");
}

#[test]
#[cfg_attr(
    not(berth_it_env),
    ignore = "needs the test fixtures: sudo bash tests/setup/setup.sh"
)]
fn tasks_share_exec_joins_a_crash_hurts_no_one_and_options_must_match() {
    let env = need_env!();
    let sb = Sandbox::new(env);
    let d = sb.debian();
    // A long task holds the container.
    let long = sb
        .berth(&[
            "run",
            "--shared",
            "kc",
            "--entrypoint",
            "",
            &d,
            "sh",
            "-c",
            "echo $(readlink /proc/self/ns/mnt); sleep 4; echo done",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !ps(&sb).iter().any(|k| k == "kc") && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    let table = sb.run(&["ps"]).ok().stdout();
    assert!(
        table.contains("kc") && table.contains("debian-python"),
        "{table}"
    );
    // A task that crashes: its own status, the container stays.
    let crash = sb.run(&[
        "run",
        "--shared",
        "kc",
        "--entrypoint",
        "",
        &d,
        "sh",
        "-c",
        "kill -SEGV $$",
    ]);
    assert_eq!(crash.code(), 128 + 11, "{}", crash.stderr());
    // berth exec joins the same namespaces, with -e and -w.
    let out = sb
        .run(&[
            "exec",
            "-e",
            "GREETING=hi",
            "-w",
            "/tmp",
            "kc",
            "sh",
            "-c",
            "echo $GREETING $(pwd) $(readlink /proc/self/ns/mnt)",
        ])
        .ok()
        .stdout();
    // The holder keeps no capability a container's process could borrow.
    let holder = sb.run(&["ps", "--format", "json"]).ok().json()[0]["pid"]
        .as_i64()
        .unwrap();
    let status = std::fs::read_to_string(format!("/proc/{holder}/status")).unwrap();
    assert!(
        status.contains("CapEff:\t0000000000000000")
            && status.contains("CapPrm:\t0000000000000000"),
        "{status}"
    );
    // Nor can a task of the container trace it or read its /proc files
    // (it is not dumpable, and its memory belongs to the keeper's user
    // namespace, where the container's processes hold no capability).
    let probe = format!(
        "cat /proc/{holder}/environ >/dev/null 2>&1 && echo environ || echo refused; \
         readlink /proc/{holder}/ns/mnt >/dev/null 2>&1 && echo ns || echo refused"
    );
    let traced = sb.run(&["exec", "kc", "sh", "-c", &probe]).ok().stdout();
    assert_eq!(traced, "refused\nrefused\n", "the holder of pid {holder}");
    // Other options for the same key are refused, not silently shared.
    sb.run(&["run", "--shared", "kc", "--writable", &d, "true"])
        .fails(125, "already runs");
    let o = long.wait_with_output().unwrap();
    let first = String::from_utf8_lossy(&o.stdout).to_string();
    assert!(o.status.success() && first.ends_with("done\n"), "{first}");
    let ns = first.lines().next().unwrap();
    assert_eq!(out.trim(), format!("hi /tmp {ns}"));
    wait_gone(&sb, "kc");
    sb.run(&["exec", "kc", "true"])
        .fails(125, "no shared container kc");
}

#[test]
#[cfg_attr(
    not(berth_it_env),
    ignore = "needs the test fixtures: sudo bash tests/setup/setup.sh"
)]
fn a_lingering_container_waits_for_the_next_task() {
    let env = need_env!();
    let sb = Sandbox::new(env);
    let d = sb.debian();
    let ns = |sb: &Sandbox| {
        sb.run(&[
            "run",
            "--shared",
            "kl",
            "--linger",
            "2",
            "--entrypoint",
            "",
            &d,
            "readlink",
            "/proc/self/ns/mnt",
        ])
        .ok()
        .stdout()
    };
    let first = ns(&sb);
    assert!(ps(&sb).contains(&"kl".to_string()));
    assert_eq!(
        ns(&sb),
        first,
        "the second task joined the lingering container"
    );
    wait_gone(&sb, "kl");
    sb.run(&["run", "--shared", "bad/key", &d, "true"])
        .fails(125, "container name");
}

#[test]
#[cfg_attr(
    not(berth_it_env),
    ignore = "needs the test fixtures: sudo bash tests/setup/setup.sh"
)]
fn a_task_killed_mid_way_leaves_the_others_running() {
    let env = need_env!();
    let sb = Sandbox::new(env);
    let d = sb.debian();
    let mut tasks = sb.spawn_berths(64, |_| {
        [
            "run",
            "--shared",
            "kk",
            "--entrypoint",
            "",
            &d,
            "sh",
            "-c",
            "echo ready; sleep 2; echo done",
        ]
        .map(String::from)
        .to_vec()
    });
    // SIGKILL one task's berth once its command runs in the container (the
    // command runs on): the others must not notice.
    let mut victim = tasks.remove(17);
    let _victims_output = wait_ready(&mut victim);
    let _ = victim.kill();
    let _ = victim.wait();
    let mut finished = 0;
    for task in outputs(tasks) {
        finished += usize::from(task.ok().stdout() == "ready\ndone\n");
    }
    assert_eq!(finished, 63, "the other 63 tasks finished");
    wait_gone(&sb, "kk");
}

#[test]
#[cfg_attr(
    not(berth_it_env),
    ignore = "needs the test fixtures: sudo bash tests/setup/setup.sh"
)]
fn a_running_shared_container_is_committed_by_its_key() {
    let env = need_env!();
    let sb = Sandbox::new(env);
    let d = sb.debian();
    // One task of container KEY running `script` (with `extra` options),
    // once its command says it is ready.
    let task = |key: &str, extra: &[&str], script: &str| {
        let mut args = vec!["run", "--shared", key];
        args.extend_from_slice(extra);
        args.extend(["--entrypoint", "", &d, "sh", "-c", script]);
        let mut task = sb.berth(&args).stdout(Stdio::piped()).spawn().unwrap();
        let ready = wait_ready(&mut task);
        (task, ready)
    };
    // A writable shared container changes its root and keeps running
    // until told to stop.
    let stop = sb.home().join("kcm-stop");
    let changes = format!(
        "echo made > /made && rm /etc/debian_version && echo ready && while [ ! -e {} ]; do sleep 0.1; done",
        stop.display()
    );
    let (mut running, _ready) = task("kcm", &["--writable"], &changes);
    let saved = sb.dir.path().join("kcm.sqsh");
    let saved = saved.to_str().unwrap();
    sb.run(&["commit", "kcm", saved]).ok();
    // It is still there (the commit took a share, then let go).
    assert!(ps(&sb).contains(&"kcm".to_string()));
    let show = "cat /made; test -e /etc/debian_version || echo removed";
    let out = sb.run(&["run", "--entrypoint", "", saved, "sh", "-c", show]);
    assert_eq!(out.ok().stdout(), "made\nremoved\n");
    std::fs::write(&stop, "").unwrap();
    assert!(running.wait().unwrap().success());
    wait_gone(&sb, "kcm");
    // A read-only container has no changes of its own.
    let (mut running, _ready) = task("kro", &[], "echo ready; sleep 2");
    sb.run(&["commit", "kro", saved])
        .fails(2, "no changes of its own to save");
    assert!(running.wait().unwrap().success());
}
