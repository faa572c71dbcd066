//! Who the command runs as, what it sees of the host (binds, the
//! read-only image, namespaces) and what it may do (privileges, real root).

use std::fs;
use std::os::unix::process::CommandExt;
use std::process::Command;

use crate::harness::{fallbacks, Sandbox};
use crate::need_env;

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
    // The id maps read as host ids, as under Pyxis and enroot (Pyxis's
    // remap_root.bats 1, 2): the user's own id, or root standing for it
    // (last, after the subordinate range where there is one).
    let uid = env
        .user
        .as_ref()
        .map(|u| u.0)
        .or_else(|| crate::harness::id_number(&["-u"]))
        .unwrap();
    let maps = "awk '{print $1, $2, $3}' /proc/self/uid_map";
    let out = sb.sh(&d, &[], maps).ok().stdout();
    assert_eq!(out, format!("{uid} {uid} 1\n"));
    let out = sb.sh(&d, &["--fakeroot"], maps).ok().stdout();
    assert_eq!(
        out.lines().last(),
        Some(format!("0 {uid} 1").as_str()),
        "{out}"
    );
    assert_eq!(
        out.lines().count(),
        if fallbacks() { 1 } else { 2 },
        "{out}"
    );
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
    // Without a range (the fallbacks pass), root emulation: root's.
    let want = if fallbacks() {
        "0:0\n0\n"
    } else {
        "1000:1000\n1000\n"
    };
    assert_eq!(out, want);
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
    // An IPC namespace of its own: its own /dev/shm and POSIX message
    // queues (a fresh mqueue at /dev/mqueue, whatever the host has).
    let show = "grep -E ' /dev/(shm|mqueue) ' /proc/self/mountinfo | sed 's/.* - //' | cut -d' ' -f1 | sort -u | tr '\\n' ' '";
    let out = sb.sh(&img, &["--unshare", "ipc"], show).ok().stdout();
    assert_eq!(out, "mqueue tmpfs ", "{out}");
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
