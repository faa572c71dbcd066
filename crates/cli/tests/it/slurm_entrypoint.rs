//! `--container-entrypoint` as Pyxis runs it (entrypoint.bats 3, 4;
//! env_vars.bats 21, issue 17): the image's entrypoint runs on its own
//! before the task's command, its output hidden unless
//! `--container-entrypoint-log` or PYXIS_CONTAINER_ENTRYPOINT_LOG=1, and
//! the command gets the environment it left; once for the tasks of a
//! node's container. On the real test Slurm as
//! the unprivileged user, with an image whose entrypoint prints a banner
//! as NGC images do.

use std::fs;

use crate::slurm_pyxis::{last_line, srun};
use crate::slurm_spank::sandbox;

#[test]
#[cfg_attr(
    not(berth_it_slurm),
    ignore = "needs root, the test fixtures and berth's SPANK plugin: sudo bash tests/setup/setup.sh, then sudo bash tests/setup/slurm_plugin.sh target/debug"
)]
fn the_entrypoint_runs_first_with_its_banner_hidden() {
    let sb = sandbox();
    let ctx = sb.dir.path().join("banner");
    fs::create_dir_all(&ctx).unwrap();
    fs::write(
        ctx.join("ep.sh"),
        "#!/bin/sh\necho '== CUDA =='\necho \"saw=${TASKVAR-unset}\"\nexport FROM_ENTRYPOINT=yes\n\
         exec \"$@\"\n",
    )
    .unwrap();
    fs::write(
        ctx.join("Dockerfile"),
        format!(
            "FROM {}/berth-test/debian-python:latest\nCOPY --chmod=755 ep.sh /ep.sh\n\
             ENV PYTORCH_VERSION=2.3\nENTRYPOINT [\"/ep.sh\"]\n",
            sb.env.anon()
        ),
    )
    .unwrap();
    sb.chown_to_user(&ctx);
    sb.build("banner", &ctx).ok();
    let img = "--container-image=banner";
    let show = "echo ${FROM_ENTRYPOINT-unset}";

    // Without --container-entrypoint the entrypoint does not run.
    let out = srun(&sb, &[], &[img, "sh", "-c", show]).ok();
    assert_eq!(out.stdout(), "unset\n");
    // With it: run first, its banner hidden, its environment handed on.
    let out = srun(&sb, &[], &[img, "--container-entrypoint", "sh", "-c", show]).ok();
    assert_eq!(out.stdout(), "yes\n");
    // The banner with --container-entrypoint-log, or the variable.
    let out = srun(
        &sb,
        &[],
        &[
            img,
            "--container-entrypoint",
            "--container-entrypoint-log",
            "sh",
            "-c",
            show,
        ],
    )
    .ok();
    assert_eq!(out.stdout(), "== CUDA ==\nsaw=unset\nyes\n");
    let log = [("PYXIS_CONTAINER_ENTRYPOINT_LOG", "1")];
    let out = srun(
        &sb,
        &log,
        &[img, "--container-entrypoint", "sh", "-c", show],
    )
    .ok();
    assert!(out.stdout().starts_with("== CUDA =="), "{}", out.stdout());
    assert_eq!(last_line(&out), "yes");

    // Pyxis's split (entrypoint.bats 3): a variable exported before srun
    // reaches the command but not the entrypoint, and what the entrypoint
    // sets wins over the task's, unless --container-env names them.
    let task = [
        ("TASKVAR", "1"),
        ("FROM_ENTRYPOINT", "task"),
        ("PYXIS_CONTAINER_ENTRYPOINT_LOG", "1"),
    ];
    let both = "echo $TASKVAR $FROM_ENTRYPOINT";
    let out = srun(
        &sb,
        &task,
        &[img, "--container-entrypoint", "sh", "-c", both],
    )
    .ok();
    assert_eq!(out.stdout(), "== CUDA ==\nsaw=unset\n1 yes\n");
    let out = srun(
        &sb,
        &task,
        &[
            img,
            "--container-entrypoint",
            "--container-env=TASKVAR,FROM_ENTRYPOINT",
            "sh",
            "-c",
            both,
        ],
    )
    .ok();
    assert_eq!(out.stdout(), "== CUDA ==\nsaw=1\n1 task\n");

    // Two tasks on the node join one container: the entrypoint runs
    // once, for the container, and every task gets what it left over its
    // own variables (the RANK berth sets for a PyTorch image included).
    let ranks = "echo $FROM_ENTRYPOINT rank=$RANK";
    let out = srun(
        &sb,
        &log,
        &["-n2", img, "--container-entrypoint", "sh", "-c", ranks],
    )
    .ok();
    let stdout = out.stdout();
    let mut lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(
        lines.iter().filter(|l| **l == "== CUDA ==").count(),
        1,
        "{stdout}"
    );
    lines.retain(|l| l.starts_with("yes"));
    lines.sort();
    assert_eq!(lines, ["yes rank=0", "yes rank=1"], "{stdout}");
}
