//! `berth run`: exit codes, signals, Docker semantics (checked against
//! podman), identity, binds, read-only image, concurrency.

use std::fs;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::Duration;

use rustix::process::{kill_process, Pid, Signal};

use crate::harness::{outputs, wait_ready, Sandbox};
use crate::need_env;

/// The stored image's full id.
fn id_of(sb: &Sandbox, image: &str) -> String {
    sb.run(&["inspect", image]).ok().json()["id"]
        .as_str()
        .unwrap()
        .to_string()
}

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
fn the_user_is_themself_inside() {
    let env = need_env!();
    let sb = Sandbox::new(env);
    let d = sb.debian();
    let out = sb
        .sh(
            &d,
            &[],
            "id -u; id -g; whoami; echo $HOME; touch $HOME/made-inside",
        )
        .ok()
        .stdout();
    let lines: Vec<&str> = out.lines().collect();
    if let Some((uid, gid, _)) = &env.user {
        assert_eq!(lines[0], uid.to_string());
        assert_eq!(lines[1], gid.to_string());
        assert_eq!(lines[2], env.var("BERTH_IT_USER"));
        // Files made in a bind belong to the user on the host.
        use std::os::unix::fs::MetadataExt;
        let m = fs::metadata(sb.home().join("made-inside")).unwrap();
        assert_eq!((m.uid(), m.gid()), (*uid, *gid));
    }
    assert_eq!(lines[3], sb.home().display().to_string());
    // --fakeroot: root inside, still the user outside.
    let out = sb
        .sh(
            &d,
            &["--fakeroot"],
            "id -u; whoami; touch /root-can-write 2>/dev/null && echo rw || echo ro",
        )
        .ok()
        .stdout();
    assert_eq!(out, "0\nroot\nro\n");
    // With a subordinate id range (setup.sh gives the test user one), image
    // files keep their owners under --fakeroot, and root can chown.
    let l = sb.layers();
    let out = sb
        .sh(
            &l,
            &["--fakeroot", "--writable"],
            "stat -c %u:%g /data/owned.txt; touch /f && chown 1000:1000 /f && stat -c %u /f",
        )
        .ok()
        .stdout();
    assert_eq!(out, "1000:1000\n1000\n");
}

#[test]
#[cfg_attr(
    not(berth_it_env),
    ignore = "needs the test fixtures: sudo bash tests/setup/setup.sh"
)]
fn binds_home_cwd_volumes_and_missing_targets() {
    let env = need_env!();
    let sb = Sandbox::new(env);
    let img = sb.layers();
    let data = sb.dir.path().join("data");
    fs::create_dir_all(&data).unwrap();
    fs::write(data.join("in.txt"), "from host\n").unwrap();
    fs::write(sb.home().join("home.txt"), "home file\n").unwrap();
    sb.chown_to_user(sb.dir.path());
    let rw = format!("{}:/new/deep/target", data.display());
    let ro = format!("{}:/mnt/ro:ro", data.display());
    let script = format!(
        "cat /new/deep/target/in.txt; cat {home}/home.txt; echo x > /new/deep/target/out.txt && echo wrote; \
         echo y > /mnt/ro/nope 2>/dev/null || echo ro-refused; ls {cwd} >/dev/null && echo cwd-ok",
        home = sb.home().display(),
        cwd = sb.dir.path().display()
    );
    let out = sb.sh(&img, &["-v", &rw, "-v", &ro], &script).ok().stdout();
    assert_eq!(out, "from host\nhome file\nwrote\nro-refused\ncwd-ok\n");
    assert!(data.join("out.txt").exists());
    // --no-home hides the home directory.
    // (run from / so that the current directory, which holds the home, is not bound)
    let script = format!("grep -c ' {} ' /proc/self/mountinfo", sb.home().display());
    let out = sb
        .berth(&[
            "run",
            "--no-home",
            "--entrypoint",
            "",
            &img,
            "/bin/sh",
            "-c",
            &script,
        ])
        .current_dir("/")
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "0\n",
        "the home is not a mount point"
    );
    // A bind target that is a symlink in the image (links/absdirlink -> /data)
    // lands inside the container, never on the host.
    let escape = format!("{}:/links/absdirlink", data.display());
    let out = sb
        .sh(&img, &["-v", &escape], "cat /data/in.txt")
        .ok()
        .stdout();
    assert_eq!(out, "from host\n");
    assert!(!std::path::Path::new("/data/in.txt").exists());
}

#[test]
#[cfg_attr(
    not(berth_it_env),
    ignore = "needs the test fixtures: sudo bash tests/setup/setup.sh"
)]
fn image_is_read_only_unless_writable() {
    let env = need_env!();
    let sb = Sandbox::new(env);
    let d = sb.debian();
    let out = sb
        .sh(&d, &[], "touch /usr/new 2>&1; echo rc=$?")
        .ok()
        .stdout();
    assert!(
        out.contains("Read-only file system") && out.contains("rc=1"),
        "{out}"
    );
    let out = sb
        .sh(&d, &["--writable"], "touch /usr/new && echo changed")
        .ok()
        .stdout();
    assert_eq!(out, "changed\n");
    // Changes vanish with the container.
    let out = sb
        .sh(&d, &[], "test -e /usr/new && echo kept || echo gone")
        .ok()
        .stdout();
    assert_eq!(out, "gone\n");
}

#[test]
#[cfg_attr(
    not(berth_it_env),
    ignore = "needs the test fixtures: sudo bash tests/setup/setup.sh"
)]
fn security_settings_hold() {
    let env = need_env!();
    let sb = Sandbox::new(env);
    let d = sb.debian();
    let out = sb
        .sh(
            &d,
            &[],
            "grep -E '^(NoNewPrivs|CapEff|CapPrm)' /proc/self/status",
        )
        .ok()
        .stdout();
    assert!(out.contains("NoNewPrivs:\t1"), "{out}");
    assert!(
        out.contains("CapEff:\t0000000000000000") && out.contains("CapPrm:\t0000000000000000"),
        "{out}"
    );
    // A setuid-root program does not elevate: passwd refuses to show root's status.
    let out = sb
        .sh(
            &d,
            &[],
            "stat -c %a /usr/bin/passwd; passwd -S root >/dev/null 2>&1; echo rc=$?",
        )
        .ok()
        .stdout();
    assert!(out.starts_with("4755\n") && !out.contains("rc=0"), "{out}");
    // The root and binds are nosuid,nodev.
    let out = sb
        .sh(&d, &[], "awk '$5==\"/\" {print $6}' /proc/self/mountinfo")
        .ok()
        .stdout();
    assert!(out.contains("nosuid") && out.contains("nodev"), "{out}");
    // No descriptor of berth's (or of its caller's, beyond stdio) reaches the command.
    let out = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "exec 7</etc/hostname; exec {} run --entrypoint '' {} /bin/sh -c 'ls /proc/self/fd | sort -n | tr \"\\n\" \" \"'",
            env.berth.display(),
            d
        ))
        .envs(sb.berth(&[]).get_envs().filter_map(|(k, v)| Some((k.to_owned(), v?.to_owned()))))
        .uid(env.user.as_ref().map(|u| u.0).unwrap_or(rustix::process::getuid().as_raw()))
        .gid(env.user.as_ref().map(|u| u.1).unwrap_or(rustix::process::getgid().as_raw()))
        .current_dir(sb.dir.path())
        .output()
        .unwrap();
    let fds = String::from_utf8_lossy(&out.stdout).to_string();
    // 0 1 2 and the directory ls reads.
    assert_eq!(
        fds.split_whitespace().count(),
        4,
        "descriptors inside: {fds} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Host files stay as protected as outside: /etc/shadow bound in is
    // still unreadable, and the host's root-owned files are not writable.
    let out = sb.sh(&d, &["-v", "/etc/shadow:/mnt/shadow", "-v", "/etc:/mnt/hostetc"], "cat /mnt/shadow >/dev/null 2>&1 && echo read-shadow || echo no-shadow; echo x >> /mnt/hostetc/hosts 2>/dev/null && echo wrote-hosts || echo no-hosts").ok().stdout();
    assert_eq!(out, "no-shadow\nno-hosts\n");
    // berth's own processes cannot be opened through /proc (CVE-2019-5736).
    let out = sb.sh(&d, &["--pid"], "cat /proc/1/exe > /dev/null 2>&1 && echo readable || echo refused; echo x >> /proc/1/exe 2>/dev/null && echo writable || echo refused").ok().stdout();
    assert_eq!(out, "refused\nrefused\n");
}

#[test]
#[cfg_attr(
    not(berth_it_env),
    ignore = "needs the test fixtures: sudo bash tests/setup/setup.sh"
)]
fn pid_and_network_namespaces() {
    let env = need_env!();
    let sb = Sandbox::new(env);
    let img = sb.layers();
    let out = sb
        .sh(&img, &["--pid"], "echo $$; ls /proc | grep -c '^[0-9]'")
        .ok()
        .stdout();
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[0], "2", "{out}");
    assert!(lines[1].parse::<u32>().unwrap() <= 4, "{out}");
    let out = sb
        .sh(
            &img,
            &["--net=none"],
            "grep -c : /proc/net/dev; grep -o 'lo:' /proc/net/dev",
        )
        .ok()
        .stdout();
    assert_eq!(out, "1\nlo:\n");
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

#[test]
#[cfg_attr(
    not(berth_it_env),
    ignore = "needs the test fixtures: sudo bash tests/setup/setup.sh"
)]
fn concurrent_runs_share_one_mount_and_it_goes_away() {
    let env = need_env!();
    let sb = Sandbox::new(env);
    let d = sb.debian();
    let runs = sb.spawn_berths(32, |i| {
        vec![
            "run".into(),
            d.clone(),
            "python3".into(),
            "-c".into(),
            format!("print({i})"),
        ]
    });
    let mut seen: Vec<u32> = outputs(runs)
        .into_iter()
        .map(|o| o.ok().stdout().trim().parse().unwrap())
        .collect();
    seen.sort();
    assert_eq!(seen, (0..32).collect::<Vec<_>>());
    let keepers = fs::read_dir(sb.dir.path().join("run/berth/keepers"))
        .unwrap()
        .count();
    assert_eq!(keepers, 1, "one keeper per image");
    // Idle keepers leave (BERTH_KEEPER_IDLE=1): no process of this sandbox remains.
    let marker = sb.dir.path().to_string_lossy().into_owned();
    let alive = || -> Vec<String> {
        fs::read_dir("/proc")
            .unwrap()
            .flatten()
            .filter_map(|p| fs::read(p.path().join("cmdline")).ok())
            .map(|c| String::from_utf8_lossy(&c).replace('\0', " "))
            .filter(|c| c.contains(&marker))
            .collect()
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !alive().is_empty() && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(alive().is_empty(), "still running: {:?}", alive());
}

#[test]
#[cfg_attr(
    not(berth_it_env),
    ignore = "needs the test fixtures: sudo bash tests/setup/setup.sh"
)]
fn runs_by_id_need_no_store_after_the_first() {
    let env = need_env!();
    let sb = Sandbox::new(env);
    let l = sb.layers();
    let id = id_of(&sb, &l);
    let out = sb
        .run(&["run", "--entrypoint", "", &id, "/bin/echo", "one"])
        .ok();
    assert_eq!(out.stdout(), "one\n");
    // The node keeps the record: with the store gone (as if its parallel
    // filesystem hiccupped), runs by id still start; by name they cannot.
    let store = sb.store();
    let hidden = sb.dir.path().join("store-away");
    fs::rename(&store, &hidden).unwrap();
    let out = sb
        .run(&["run", "--entrypoint", "", &id, "/bin/echo", "two"])
        .ok();
    assert_eq!(out.stdout(), "two\n");
    sb.run(&["run", "--entrypoint", "", &l, "/bin/true"])
        .fails(125, "not in the store");
}

#[test]
#[cfg_attr(
    not(berth_it_env),
    ignore = "needs the test fixtures: sudo bash tests/setup/setup.sh"
)]
fn a_node_record_of_another_store_or_of_a_removed_image_is_not_used() {
    let env = need_env!();
    let sb = Sandbox::new(env);
    let l = sb.layers();
    let id = id_of(&sb, &l);
    let run_id = |store: &str, word: &str| {
        sb.run(&[
            "--store",
            store,
            "run",
            "--entrypoint",
            "",
            &id,
            "/bin/echo",
            word,
        ])
    };
    let first = sb.store().to_string_lossy().to_string();
    assert_eq!(run_id(&first, "one").ok().stdout(), "one\n");
    // The same image in a second store (another configuration on the
    // node); the first store goes away. The node's record names the
    // first: a run with the second store does not follow it.
    let second = sb.dir.path().join("second-store");
    fs::create_dir(&second).unwrap();
    sb.chown_to_user(&second);
    let second = second.to_string_lossy().to_string();
    sb.run(&["--store", &second, "pull", "-q", "--tls-verify=false", &l])
        .ok();
    sb.wait_keepers_gone();
    fs::rename(sb.store(), sb.dir.path().join("store-away")).unwrap();
    assert_eq!(run_id(&second, "two").ok().stdout(), "two\n");
    // Removed from its store since the record was written: the run says
    // the image is not there, not that a file is missing.
    sb.wait_keepers_gone();
    sb.run(&["--store", &second, "rmi", &id]).ok();
    let out = run_id(&second, "three");
    assert_eq!(out.code(), 125, "{}", out.stderr());
    assert!(!out.stderr().contains("No such file"), "{}", out.stderr());
}

#[test]
#[cfg_attr(
    not(berth_it_root),
    ignore = "needs root and the test fixtures: sudo bash tests/setup/setup.sh, then the tests as root"
)]
fn real_root_uses_a_kernel_mount_and_keeps_only_podmans_default_capabilities() {
    let env = need_env!();
    env.test_user();
    let sb = Sandbox::new(env);
    let img = sb.layers();
    // The user's store, used by root: refused (M6 of the security review:
    // the user could change what root runs).
    let mut c = sb.berth(&["run", &img, "true"]);
    c.uid(0).gid(0);
    let out = c.output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "{err}");
    assert!(err.contains("root uses only root's stores"), "{err}");
    // Root's own store (no user namespace).
    let root_store = sb.dir.path().join("root-store");
    fs::create_dir_all(&root_store).unwrap();
    let mut c = sb.berth(&["pull", "-q", "--tls-verify=false", &img]);
    c.uid(0).gid(0).env("BERTH_STORE", &root_store);
    assert!(c.status().unwrap().success());
    let mut c = sb.berth(&[
        "run",
        "--entrypoint",
        "",
        &img,
        "/bin/sh",
        "-c",
        "id -u; touch /x 2>/dev/null && echo rw || echo ro; grep CapEff /proc/self/status",
    ]);
    c.uid(0)
        .gid(0)
        .env("BERTH_STORE", &root_store)
        .env("XDG_RUNTIME_DIR", sb.dir.path().join("root-run"));
    fs::create_dir_all(sb.dir.path().join("root-run")).unwrap();
    let out = c.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines[0], "0");
    assert_eq!(lines[1], "ro");
    // Podman's default set (0x800405fb: Docker's without NET_RAW, MKNOD
    // and AUDIT_WRITE), not every capability.
    assert!(lines[2].ends_with("00000000800405fb"), "{stdout}");
    // Root's state is in /run/berth, whatever XDG_RUNTIME_DIR says.
    assert!(!sb.dir.path().join("root-run/berth").exists());
    assert!(fs::read_dir("/run/berth/keepers")
        .unwrap()
        .flatten()
        .any(|k| k.file_name().to_string_lossy().ends_with("-root")));
}
