//! What runs and what it gets: exit codes, forwarded signals, entrypoint
//! and command as podman runs them, the environment, `berth shell`.

use std::fs;
use std::process::Stdio;

use rustix::process::{kill_process, Pid, Signal};

use crate::harness::{wait_ready, Sandbox};
use crate::need_env;

#[test]
#[cfg_attr(
    not(berth_it_env),
    ignore = "needs the test fixtures: sudo bash tests/setup/setup.sh"
)]
fn exit_codes_are_the_commands() {
    let env = need_env!();
    let sb = Sandbox::new(env);
    let img = sb.layers();
    assert_eq!(sb.sh(&img, &[], "exit 42").code(), 42);
    assert_eq!(sb.sh(&img, &[], "kill -9 $$").code(), 137);
    assert_eq!(sb.sh(&img, &["--pid"], "exit 5").code(), 5);
    sb.run(&["run", "--entrypoint", "", &img, "nosuchcmd"])
        .fails(127, "command not found in the image");
    sb.run(&["run", "--entrypoint", "", &img, "/etc/passwd"])
        .fails(126, "not an executable");
    sb.run(&["run", "--entrypoint", "", &img, "/no/such/file"])
        .fails(127, "no such file");
    sb.run(&["run", "no-such-image", "true"])
        .fails(125, "not in the store");
    sb.run(&["run", "-v", "/no/such/dir:/x", &img])
        .fails(125, "/no/such/dir");
    sb.run(&["run", "-w", "relative", &img])
        .fails(125, "absolute");
}

#[test]
#[cfg_attr(
    not(berth_it_env),
    ignore = "needs the test fixtures: sudo bash tests/setup/setup.sh"
)]
fn signals_are_forwarded() {
    let env = need_env!();
    let sb = Sandbox::new(env);
    let img = sb.layers();
    for (signal, script, want) in [
        (
            Signal::USR1,
            "trap 'exit 7' USR1; echo ready; while :; do sleep 0.05; done",
            7,
        ),
        (
            Signal::TERM,
            "trap 'exit 9' TERM; echo ready; while :; do sleep 0.05; done",
            9,
        ),
        (
            Signal::INT,
            "trap 'exit 11' INT; echo ready; while :; do sleep 0.05; done",
            11,
        ),
        (
            Signal::HUP,
            "echo ready; exec sleep 30",
            128 + Signal::HUP.as_raw(),
        ),
    ] {
        let mut child = sb
            .berth(&["run", "--entrypoint", "", &img, "/bin/sh", "-c", script])
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        // The command runs, its trap set: berth forwards from here on (it
        // blocks the signals before it starts the container).
        let _rest = wait_ready(&mut child);
        kill_process(Pid::from_child(&child), signal).unwrap();
        let status = child.wait().unwrap();
        assert_eq!(status.code(), Some(want), "signal {signal:?}");
    }
}

/// Cases compared with `podman run` on the same images.
fn semantic_cases(layers: &str, debian: &str) -> Vec<Vec<String>> {
    let v = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    vec![
        v(&[layers]),
        v(&[layers, "x", "y"]),
        v(&["--entrypoint", "/bin/pwd", layers]),
        v(&["--entrypoint", "/bin/sh", layers, "-c", "echo $FOO:$PATH"]),
        v(&[
            "-e",
            "FOO=cli",
            "--entrypoint",
            "/bin/sh",
            layers,
            "-c",
            "echo $FOO",
        ]),
        v(&["-w", "/tmp", "--entrypoint", "/bin/pwd", layers]),
        v(&[debian]),
        v(&[debian, "pwd"]),
        v(&[debian, "sh", "-c", "echo $GREETING; echo $PATH"]),
        v(&[
            "--entrypoint",
            "python3",
            debian,
            "-c",
            "import os; print(os.getcwd())",
        ]),
    ]
}

#[test]
#[cfg_attr(
    not(berth_it_env),
    ignore = "needs the test fixtures: sudo bash tests/setup/setup.sh"
)]
fn docker_semantics_match_podman() {
    let env = need_env!();
    let sb = Sandbox::new(env);
    let (l, d) = (sb.layers(), sb.debian());
    let have_podman = sb
        .podman(&["pull", "-q", "--tls-verify=false", &l])
        .is_some_and(|o| o.code() == 0)
        && sb
            .podman(&["pull", "-q", "--tls-verify=false", &d])
            .is_some_and(|o| o.code() == 0);
    for case in semantic_cases(&l, &d) {
        let args: Vec<&str> = case.iter().map(String::as_str).collect();
        let mut berth_args = vec!["run"];
        berth_args.extend_from_slice(&args);
        let ours = sb.run(&berth_args).ok().stdout();
        if have_podman {
            let mut pargs = vec!["run", "--rm"];
            pargs.extend_from_slice(&args);
            let theirs = sb.podman(&pargs).unwrap();
            assert_eq!(theirs.code(), 0, "podman {args:?}: {}", theirs.stderr());
            assert_eq!(
                ours,
                theirs.stdout(),
                "berth and podman differ for {args:?}"
            );
        }
    }
    if !have_podman {
        eprintln!(
            "podman is missing from the fixture: berth's output was not compared with podman's"
        );
        assert!(
            !crate::harness::required(),
            "podman is missing from the fixture"
        );
    }
    // Expected values, spelled out.
    let out = sb.run(&["run", &l]).ok().stdout();
    assert_eq!(out, "berth-entrypoint default-cmd\n");
    assert_eq!(sb.run(&["run", &d]).ok().stdout(), "default cmd\n");
    assert_eq!(sb.run(&["run", &d, "pwd"]).ok().stdout(), "/srv/app\n");
}

#[test]
#[cfg_attr(
    not(berth_it_env),
    ignore = "needs the test fixtures: sudo bash tests/setup/setup.sh"
)]
fn host_environment_does_not_leak() {
    let env = need_env!();
    let mut sb = Sandbox::new(env);
    let d = sb.debian();
    sb.extra_env = vec![
        ("PATH".into(), "/bogus/bin:/usr/bin:/bin".into()),
        ("LD_LIBRARY_PATH".into(), "/bogus/lib".into()),
        ("PYTHONPATH".into(), "/bogus/py".into()),
        ("SLURM_JOB_ID".into(), "4242".into()),
        ("PMI_RANK".into(), "3".into()),
        ("EDITOR".into(), "vi".into()),
    ];
    let script = "echo PATH=$PATH; echo LD=${LD_LIBRARY_PATH-unset}; echo PY=${PYTHONPATH-unset}; echo JOB=$SLURM_JOB_ID; echo RANK=$PMI_RANK; echo ED=${EDITOR-unset}; echo HOME=$HOME; echo USER=$USER";
    let out = sb.sh(&d, &[], script).ok().stdout();
    assert!(
        out.contains("PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\n"),
        "{out}"
    );
    assert!(
        out.contains("LD=unset") && out.contains("PY=unset") && out.contains("ED=unset"),
        "{out}"
    );
    assert!(out.contains("JOB=4242") && out.contains("RANK=3"), "{out}");
    assert!(
        out.contains(&format!("HOME={}", sb.home().display())),
        "{out}"
    );
    let out = sb.sh(&d, &["--env-host"], script).ok().stdout();
    assert!(out.contains("ED=vi") && out.contains("LD=unset"), "{out}");
    let envfile = sb.dir.path().join("env.list");
    fs::write(&envfile, "# comment\nFROMFILE=yes\nEDITOR\n").unwrap();
    sb.chown_to_user(&envfile);
    let out = sb
        .sh(
            &d,
            &["--env-file", envfile.to_str().unwrap()],
            "echo $FROMFILE $EDITOR",
        )
        .ok()
        .stdout();
    assert_eq!(out, "yes vi\n");
}

#[test]
#[cfg_attr(
    not(berth_it_env),
    ignore = "needs the test fixtures: sudo bash tests/setup/setup.sh"
)]
fn shell_and_auto_pull() {
    let env = need_env!();
    let sb = Sandbox::new(env);
    // An unknown image named with its registry is pulled first.
    let r = format!("{}/berth-test/layers:latest", env.anon());
    let out = sb
        .run(&[
            "run",
            "--tls-verify=false",
            "--entrypoint",
            "",
            &r,
            "/bin/echo",
            "pulled",
        ])
        .ok();
    assert_eq!(out.stdout(), "pulled\n");
    let out = sb.run_with_input(&["shell", &r], "echo from-shell; exit 3\n");
    assert_eq!(out.code(), 3, "{}", out.stderr());
    assert_eq!(out.stdout(), "from-shell\n");
}
