//! `container_scope=global` in plugstack.conf: Pyxis's named containers
//! that outlive their job, as berth's named containers in the user's
//! store. The test cluster runs with one plugstack.conf, so these tests run
//! in a pass of their own (tests/run.sh restarts the cluster with
//! `container_scope=global`, then `cargo test -- --ignored slurm_global::`).

use std::path::Path;

use crate::harness::{Out, Sandbox};
use crate::slurm_spank::sandbox;

/// `srun -N1 ARGS`: a job of its own.
fn srun(sb: &Sandbox, args: &[&str]) -> Out {
    let mut all = vec!["-N1"];
    all.extend_from_slice(args);
    let mut c = sb.command(Path::new("/usr/bin/srun"), &all);
    c.env("SLURM_CONF", sb.env.var("BERTH_IT_SLURM_CONF"));
    c.current_dir(sb.dir.path());
    Out(c.output().unwrap())
}

#[test]
#[ignore = "runs in tests/run.sh's second cluster pass (proctrack/cgroup, container_scope=global)"]
fn a_named_container_outlives_its_job() {
    let sb = sandbox();
    let img = format!("{}/berth-test/layers:latest", sb.env.anon());
    let image = format!("--container-image={img}");
    // Job 1 writes into the named container.
    srun(
        &sb,
        &[
            &image,
            "--container-name=gdev",
            "sh",
            "-c",
            "echo kept > /etc/marker",
        ],
    )
    .ok();
    // Job 2 names it alone: its image and its changes.
    let out = srun(&sb, &["--container-name=gdev", "cat", "/etc/marker"]).ok();
    assert_eq!(out.stdout(), "kept\n");
    // Two tasks on the node at once see it (stacked read-only).
    let out = srun(&sb, &["-n2", "--container-name=gdev", "cat", "/etc/marker"]).ok();
    assert_eq!(out.stdout(), "kept\nkept\n");
    // It is the user's named container: berth lists it.
    let listed = sb.run(&["ps", "-a"]).ok().stdout();
    assert!(listed.contains("gdev"), "{listed}");
    // :create refuses it; once removed, :exec finds none.
    let out = srun(&sb, &[&image, "--container-name=gdev:create", "true"]);
    assert_ne!(out.code(), 0);
    assert!(out.stderr().contains("exists already"), "{}", out.stderr());
    sb.run(&["rm", "gdev"]).ok();
    let out = srun(&sb, &["--container-name=gdev:exec", "true"]);
    assert_ne!(out.code(), 0);
    assert!(
        out.stderr().contains("no container gdev"),
        "{}",
        out.stderr()
    );
    // :create with two tasks on the node: made once, by the step's first
    // task; the other runs it too (not "exists already").
    let out = srun(
        &sb,
        &[
            "-n2",
            "-O",
            &image,
            "--container-name=gnew:create",
            "sh",
            "-c",
            "sleep 1",
        ],
    );
    assert_eq!(out.code(), 0, "{}", out.stderr());
    sb.run(&["rm", "gnew"]).ok();
}
