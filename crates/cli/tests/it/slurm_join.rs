//! The plugin's tasks join their node's shared container from slurmstepd's
//! task process (crates/slurm/src/in_place.rs): no berth process runs
//! beside a task, each task keeps its own Slurm variables, and the
//! container stays while any task's command runs.

use std::path::Path;
use std::time::Duration;

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

    // A command's own words are not berth's options, in shared and in
    // per-task mode.
    for mode in ["--container-mode=shared", "--container-mode=per-task"] {
        let out = slurm(
            &sb,
            "/usr/bin/srun",
            &[
                "-N1",
                "-n2",
                "-O",
                mode,
                &img,
                "sh",
                "-c",
                "echo $1 $2",
                "sh",
                "--shared",
                "--entrypoint-first",
            ],
        )
        .ok()
        .stdout();
        assert_eq!(
            out.lines().collect::<Vec<_>>(),
            ["--shared --entrypoint-first"; 2],
            "{mode}: {out}"
        );
    }

    // Task 0 ends at once; the container stays for task 1's command
    // (berth ps lists it meanwhile), though that command closed every
    // descriptor it inherited, its share of the container included, and
    // goes with it.
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
            "[ $SLURM_PROCID = 0 ] && exit 0; exec python3 -c 'import os, time; os.closerange(3, 65536); time.sleep(4); print(open(\"/etc/debian_version\").read().strip())'",
        ],
    );
    c.env("SLURM_CONF", srun);
    c.stdout(std::process::Stdio::piped());
    c.stderr(std::process::Stdio::piped());
    let step = c.spawn().unwrap();
    let listed = |sb: &crate::harness::Sandbox| sb.run(&["ps"]).ok().stdout().contains("slurm-");
    let started = std::time::Instant::now();
    while !listed(&sb) && started.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(100));
    }
    // Then well after task 0 ended and task 1 closed its descriptors (an
    // anchor without tasks leaves within 0.1 s).
    std::thread::sleep(Duration::from_millis(1500));
    let listed = sb.run(&["ps"]).ok().stdout();
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
