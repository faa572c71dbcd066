//! `srun --environment=NAME`: CSCS's environment definition files under
//! berth's plugin, on the real test Slurm as the unprivileged user. The
//! file's image is pinned at submission; a bad file stops the step there.

use std::fs;
use std::path::Path;

use crate::harness::Out;
use crate::slurm_spank::sandbox;

#[test]
#[cfg_attr(
    not(berth_it_slurm),
    ignore = "needs root, the test fixtures and berth's SPANK plugin: sudo bash tests/setup/setup.sh, then sudo bash tests/setup/slurm_plugin.sh target/debug"
)]
fn srun_runs_in_an_environment_file() {
    let sb = sandbox();
    let edf = sb.home().join(".edf");
    fs::create_dir_all(&edf).unwrap();
    fs::write(
        edf.join("py.toml"),
        format!(
            "image = \"{}/berth-test/debian-python:latest\"\nmounts = [\"${{HOME}}:/h\"]\nworkdir = \"/h\"\n\n[env]\nGREETING = \"from the file\"\n",
            sb.env.anon()
        ),
    )
    .unwrap();
    fs::write(
        edf.join("broken.toml"),
        "image = \"x\"\nworkdir = \"${UNSET_IN_JOB}\"\n",
    )
    .unwrap();
    sb.chown_to_user(&sb.home());
    let srun = |args: &[&str]| {
        let mut all = vec!["-N1", "-n2"];
        all.extend_from_slice(args);
        let mut c = sb.command(Path::new("/usr/bin/srun"), &all);
        c.env("SLURM_CONF", sb.env.var("BERTH_IT_SLURM_CONF"));
        c.current_dir(sb.dir.path());
        Out(c.output().unwrap())
    };
    let out = srun(&[
        "--environment=py",
        "sh",
        "-c",
        "echo \"$GREETING $(pwd) $(python3 -c 'print(6*7)')\"",
    ])
    .ok();
    let stdout = out.stdout();
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines, vec!["from the file /h 42"; 2], "{}", out.stderr());
    // Options of the plugin add to the file.
    let out = srun(&[
        "--environment=py",
        "--container-env=GREETING",
        "sh",
        "-c",
        "echo $GREETING",
    ]);
    assert!(out.ok().stdout().lines().all(|l| l == "from the file"));
    // A bad file stops the step at submission, naming file and line.
    let out = srun(&["--environment=broken", "true"]);
    assert_ne!(out.code(), 0);
    assert!(
        out.stderr().contains("broken.toml, line 2") && out.stderr().contains("UNSET_IN_JOB"),
        "{}",
        out.stderr()
    );
}

#[test]
#[cfg_attr(
    not(berth_it_slurm),
    ignore = "needs root, the test fixtures and berth's SPANK plugin: sudo bash tests/setup/setup.sh, then sudo bash tests/setup/slurm_plugin.sh target/debug"
)]
fn srun_mounts_squashfs_data_files() {
    let sb = sandbox();
    let file = crate::runtime_run::data_mounts::dataset(&sb);
    fs::write(
        sb.dir.path().join("ds.toml"),
        format!(
            "image = \"{}/berth-test/layers:latest\"\nentrypoint = false\nmounts = [\"{}:/ds:sqsh\"]\n",
            sb.env.anon(),
            file.display()
        ),
    )
    .unwrap();
    sb.chown_to_user(sb.dir.path());
    let mut c = sb.command(
        Path::new("/usr/bin/srun"),
        &[
            "-N1",
            "-n2",
            "--environment=./ds.toml",
            "--container-mounts=./ds.sqsh:/more:sqsh",
            "sh",
            "-c",
            "cat /ds/a.txt; busybox cmp /ds/sub/b.bin /more/sub/b.bin && echo same",
        ],
    );
    c.env("SLURM_CONF", sb.env.var("BERTH_IT_SLURM_CONF"));
    c.current_dir(sb.dir.path());
    let stdout = Out(c.output().unwrap()).ok().stdout();
    let mut lines: Vec<&str> = stdout.lines().collect();
    lines.sort();
    assert_eq!(
        lines,
        vec![
            "hello from the dataset",
            "hello from the dataset",
            "same",
            "same"
        ]
    );
}
