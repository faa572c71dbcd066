//! The plugin's tasks join their node's shared container from slurmstepd's
//! task process (crates/slurm/src/in_place.rs): no berth process runs
//! beside a task, each task keeps its own Slurm variables, and the
//! container stays while any task's command runs.

use std::path::Path;
use std::time::{Duration, Instant};

use crate::slurm_spank::{image, sandbox, slurm};

#[test]
#[cfg_attr(
    not(berth_it_slurm),
    ignore = "needs root, the test fixtures and berth's SPANK plugin: sudo bash tests/setup/setup.sh, then sudo bash tests/setup/slurm_plugin.sh target/debug"
)]
fn tasks_join_the_nodes_container_from_slurmstepd() {
    let sb = sandbox();
    let img = image(&sb, "debian-python");
    // The task's parent is slurmstepd (no berth in between), every task
    // is in one mount namespace, and the per-task variables are each
    // task's own.
    let script = "echo $(cat /proc/$PPID/comm) $(readlink /proc/self/ns/mnt) $SLURM_PROCID $container $(head -1 /etc/os-release)";
    let out = slurm(
        &sb,
        "/usr/bin/srun",
        &["-N1", "-n4", "-O", &img, "sh", "-c", script],
    )
    .ok()
    .stdout();
    let mut lines: Vec<Vec<&str>> = out.lines().map(|l| l.split(' ').collect()).collect();
    lines.sort_by_key(|l| l.get(2).copied());
    assert_eq!(lines.len(), 4, "{out}");
    for (rank, l) in lines.iter().enumerate() {
        assert_eq!(l[0], "slurmstepd", "the task's parent: {out}");
        assert!(
            l[1].starts_with("mnt:") && l[1] == lines[0][1],
            "one container: {out}"
        );
        assert_eq!(l[2], rank.to_string(), "SLURM_PROCID: {out}");
        assert_eq!(l[3], "berth", "{out}");
        assert!(l[4..].join(" ").contains("Debian GNU/Linux 12"), "{out}");
    }

    // Task 0 ends at once; the container stays for task 1's command,
    // which holds its share (berth ps lists it meanwhile), and goes with it.
    let srun = sb.env.var("BERTH_IT_SLURM_CONF");
    let mut c = sb.command(
        Path::new("/usr/bin/srun"),
        &[
            "-N1",
            "-n2",
            "-O",
            &img,
            "sh",
            "-c",
            "[ $SLURM_PROCID = 0 ] && exit 0; sleep 4; cat /etc/debian_version",
        ],
    );
    c.env("SLURM_CONF", srun);
    c.stdout(std::process::Stdio::piped());
    let step = c.spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(3);
    let mut listed = String::new();
    while Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(300));
        listed = sb.run(&["ps"]).ok().stdout();
        if listed.contains("slurm-") {
            break;
        }
    }
    let out = crate::harness::Out(step.wait_with_output().unwrap()).ok();
    assert!(
        listed.contains("slurm-"),
        "berth ps during the step: {listed}"
    );
    assert!(out.stdout().trim().starts_with("12."), "{}", out.stdout());
    std::thread::sleep(Duration::from_millis(500));
    let after = sb.run(&["ps"]).ok().stdout();
    assert!(!after.contains("slurm-"), "the container went: {after}");
}
