//! Findings of the security review (../shared/notes/reviews/security.md),
//! each tried as the review describes it, as the unprivileged user: the
//! attack fails. Image identity files (M2, L12) and COPY sources outside
//! the build context (H3).

use std::fs;
use std::process::Command;

use crate::harness::Sandbox;
use crate::need_env;

/// Pushes a busybox image made with umoci whose `/etc` the shell snippet
/// `etc` fills (run in the rootfs's etc/, as root), and returns its
/// reference.
fn image_with_etc(sb: &Sandbox, name: &str, etc: &str) -> String {
    image_with(sb, name, etc, "")
}

/// [`image_with_etc`] with more `umoci config` arguments (`--config.env
/// K=V`, say).
fn image_with(sb: &Sandbox, name: &str, etc: &str, config: &str) -> String {
    let work = sb.dir.path().join(format!("img-{name}"));
    fs::create_dir_all(&work).unwrap();
    let tag = format!("{}-{}", std::process::id(), name);
    let sh = format!(
        "set -e; cd {w}; umoci init --layout layout; umoci new --image layout:t; \
         umoci unpack --image layout:t bundle >/dev/null; r=bundle/rootfs; \
         mkdir -p $r/bin $r/etc $r/proc $r/tmp; cp /bin/busybox $r/bin/busybox; \
         for a in sh cat grep; do ln -s busybox $r/bin/$a; done; \
         (cd $r/etc && {etc}); \
         umoci repack --image layout:t bundle >/dev/null; \
         umoci config --image layout:t --config.env PATH=/bin {config} >/dev/null; \
         skopeo --insecure-policy copy -q --dest-tls-verify=false oci:layout:t \
           docker://{reg}/berth-test/identity:{tag}",
        w = work.display(),
        reg = sb.env.anon(),
    );
    let st = Command::new("sh").arg("-c").arg(&sh).status().unwrap();
    assert!(st.success(), "making the {name} image failed");
    let r = format!("{}/berth-test/identity:{tag}", sb.env.anon());
    sb.run(&["pull", "--tls-verify=false", &r]).ok();
    r
}

/// M2: the image's /etc/passwd -> /proc/self/environ and /etc/group -> a
/// host file of the user's. berth used to read both on the host (before
/// pivot_root) and bind their content into the container; now it follows
/// them inside the image, where they lead nowhere, and says so.
#[test]
#[cfg_attr(
    not(berth_it_env),
    ignore = "needs the test fixtures: sudo bash tests/setup/setup.sh"
)]
fn an_images_identity_file_symlinks_do_not_reach_host_files() {
    let env = need_env!();
    let mut sb = Sandbox::new(env);
    let secret = sb.home().join("secret.txt");
    fs::write(&secret, "HOST-SECRET-4711\n").unwrap();
    sb.chown_to_user(&secret);
    sb.extra_env
        .push(("BERTH_TEST_TOKEN".into(), "token-leak-0815".into()));
    for (name, etc) in [
        ("environ", "ln -s /proc/self/environ passwd".to_string()),
        ("hostfile", format!("ln -s {} group", secret.display())),
    ] {
        let img = image_with_etc(&sb, name, &etc);
        let out = sb.run(&["run", "--no-home", &img, "cat", "/etc/passwd", "/etc/group"]);
        let all = format!("{}{}", out.stdout(), out.stderr());
        assert!(
            !all.contains("HOST-SECRET"),
            "{name}: a host file reached the container: {all}"
        );
        assert!(
            !all.contains("token-leak"),
            "{name}: berth's environment leaked: {all}"
        );
        assert_ne!(out.code(), 0, "{name}: {all}");
        assert!(
            all.contains("is a symlink to something the image does not have"),
            "{name}: {all}"
        );
    }
    // A symlink that leads somewhere inside the image is read there.
    let img = image_with_etc(
        &sb,
        "inside",
        "mkdir -p ../opt && echo 'imageuser:x:4242:4242::/:/bin/sh' > ../opt/passwd && ln -s /opt/passwd passwd",
    );
    let out = sb
        .run(&["run", "--no-home", &img, "cat", "/etc/passwd"])
        .ok();
    let uid = env.user.as_ref().map(|u| u.0).unwrap_or(0);
    assert!(
        out.stdout().contains("imageuser:x:4242:"),
        "{}",
        out.stdout()
    );
    assert!(
        out.stdout().contains(&format!(":x:{uid}:")),
        "{}",
        out.stdout()
    );
}

/// M2: a FIFO (or anything but a regular file) and an oversized file as
/// /etc/passwd are refused with a clear message, not read (a FIFO hung the
/// run, /dev/zero exhausted it).
#[test]
#[cfg_attr(
    not(berth_it_env),
    ignore = "needs the test fixtures: sudo bash tests/setup/setup.sh"
)]
fn an_images_identity_file_must_be_a_small_regular_file() {
    let env = need_env!();
    let sb = Sandbox::new(env);
    let fifo = image_with_etc(&sb, "fifo", "mkfifo passwd");
    let big = image_with_etc(
        &sb,
        "big",
        "head -c 5000000 /dev/zero | tr '\\0' x > passwd",
    );
    for (img, needle) in [(fifo, "is not a regular file"), (big, "is 5000000 bytes")] {
        let start = std::time::Instant::now();
        // Bounded: before the fix the FIFO hung berth for good.
        let berth = env.berth.display().to_string();
        let out = crate::harness::Out(
            sb.command(
                std::path::Path::new("/usr/bin/timeout"),
                &["60", &berth, "run", &img, "true"],
            )
            .output()
            .unwrap(),
        );
        assert_ne!(out.code(), 0, "{img}: {}", out.stderr());
        assert!(out.stderr().contains("/etc/passwd"), "{}", out.stderr());
        assert!(out.stderr().contains(needle), "{}", out.stderr());
        assert!(!out.stderr().contains("panicked"), "{}", out.stderr());
        assert!(start.elapsed().as_secs() < 60, "the run hung");
    }
}

/// L12: a $HOME with a newline would add a line (another user) to the
/// container's /etc/passwd.
#[test]
#[cfg_attr(
    not(berth_it_env),
    ignore = "needs the test fixtures: sudo bash tests/setup/setup.sh"
)]
fn a_home_with_a_newline_or_colon_is_refused() {
    let env = need_env!();
    let sb = Sandbox::new(env);
    let img = image_with_etc(
        &sb,
        "plain",
        "echo 'root:x:0:0:root:/root:/bin/sh' > passwd",
    );
    for home in ["/tmp/x\nevil:x:0:0::/:/bin/sh", "/tmp/a:b"] {
        let out = sb
            .berth(&["run", &img, "cat", "/etc/passwd"])
            .env("HOME", home)
            .output()
            .unwrap();
        let (text, err) = (
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
        );
        assert!(
            !text.contains("evil:x:0:0"),
            "{home:?}: a line was injected: {text}"
        );
        assert!(!out.status.success(), "{home:?}: {text}");
        assert!(err.contains("holds ':' or a newline"), "{err}");
    }
}

/// H3: COPY sources reached through symlinks of the build context that
/// point outside it (relative, far up, and absolute) stay inside the
/// context (as BuildKit resolves them): nothing of the user's files is
/// copied into the image.
#[test]
#[cfg_attr(
    not(berth_it_env),
    ignore = "needs the test fixtures: sudo bash tests/setup/setup.sh"
)]
fn copy_through_context_symlinks_never_reads_outside_the_context() {
    let env = need_env!();
    let sb = Sandbox::new(env);
    let secret_dir = sb.home().join("private");
    fs::create_dir_all(&secret_dir).unwrap();
    fs::write(secret_dir.join("key"), "HOST-SECRET-KEY\n").unwrap();
    let ctx = sb.dir.path().join("ctx");
    fs::create_dir_all(ctx.join("sub")).unwrap();
    fs::write(ctx.join("sub/ok"), "inside\n").unwrap();
    let ln = |t: &str, n: &str| std::os::unix::fs::symlink(t, ctx.join(n)).unwrap();
    ln("../home/private", "rel-out");
    ln("../../../../../../../../..", "far-up");
    ln(secret_dir.to_str().unwrap(), "abs-out");
    ln("sub", "in");
    sb.chown_to_user(sb.dir.path());
    let up = sb.home().strip_prefix("/").unwrap().display().to_string();
    for (i, src) in [
        "rel-out/key".to_string(),
        format!("far-up/{up}/private/key"),
        "abs-out/key".to_string(),
        "abs-out".to_string(),
    ]
    .iter()
    .enumerate()
    {
        fs::write(
            ctx.join("Dockerfile"),
            format!("FROM scratch\nCOPY {src} /stolen\n"),
        )
        .unwrap();
        let tag = format!("h3-{i}");
        let out = sb.run(&["build", "-t", &tag, ctx.to_str().unwrap()]);
        assert_ne!(
            out.code(),
            0,
            "{src}: the build copied it: {}",
            out.stderr()
        );
        assert!(
            out.stderr().contains("not found in the build context"),
            "{src}: {}",
            out.stderr()
        );
        assert!(!out.stderr().contains("panicked"), "{}", out.stderr());
    }
    // Symlinks inside the context still work.
    fs::write(
        ctx.join("Dockerfile"),
        "FROM scratch\nCOPY in/ok /ok\nCOPY far-up/sub/ok /ok2\n",
    )
    .unwrap();
    sb.run(&["build", "-t", "h3-ok", ctx.to_str().unwrap()])
        .ok();
    let sqfs = sb.squashfs_of("h3-ok");
    let dest = sb.dir.path().join("unpacked");
    crate::harness::unsquash(&sqfs, &dest);
    assert_eq!(fs::read_to_string(dest.join("ok")).unwrap(), "inside\n");
    assert_eq!(fs::read_to_string(dest.join("ok2")).unwrap(), "inside\n");
}

/// M4: the container's command shares the caller's terminal; TIOCSTI would
/// push input into it, which the caller's shell runs after the container
/// exits. The default seccomp filter refuses it (EPERM); with
/// `--security-opt seccomp=unconfined` the same command is not refused by
/// berth (this kernel's `dev.tty.legacy_tiocsti` decides).
#[test]
#[cfg_attr(
    not(berth_it_env),
    ignore = "needs the test fixtures: sudo bash tests/setup/setup.sh"
)]
fn the_container_cannot_inject_input_into_the_callers_terminal() {
    let env = need_env!();
    let sb = Sandbox::new(env);
    sb.pull("debian-python:latest");
    let img = format!("{}/berth-test/debian-python:latest", env.anon());
    let probe = "import fcntl, termios\n\
                 try:\n    fcntl.ioctl(0, termios.TIOCSTI, b'#')\n    print('INJECTED')\n\
                 except OSError as e:\n    print('refused', e.errno)";
    // `python3 -c CODE` in the container, its stdin a pty (script(1)).
    let in_pty = |extra: &str, code: &str| {
        let cmd = format!(
            "{} run {extra} {img} python3 -c \"{code}\"",
            env.berth.display()
        );
        let out = sb
            .command(
                std::path::Path::new("/usr/bin/script"),
                &["-qec", &cmd, "/dev/null"],
            )
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let denied = in_pty("", probe);
    assert!(
        denied.contains("refused 1"),
        "TIOCSTI was not refused with EPERM: {denied}"
    );
    let open = in_pty("--security-opt seccomp=unconfined", probe);
    assert!(
        !open.contains("refused 1"),
        "unconfined still refused: {open}"
    );
    // An ordinary terminal ioctl still works under the filter.
    let size = in_pty("", "import os; print('size', os.get_terminal_size(0))");
    assert!(size.contains("size"), "{size}");
    sb.run(&["run", "--security-opt", "apparmor=x", &img, "true"])
        .fails(125, "--security-opt");
    // Checked before anything is pulled: no pull of an image that is not
    // there, the option named.
    let missing = format!("{}/berth-test/not-there:latest", sb.env.anon());
    let out = sb.run(&["run", "--security-opt", "seccomp=x", &missing, "true"]);
    assert_eq!(out.code(), 125, "{}", out.stderr());
    assert!(out.stderr().contains("--security-opt"), "{}", out.stderr());
    assert!(!out.stderr().contains("Fetching"), "{}", out.stderr());
}

/// Unmounts a host mount the test made, however the test ends.
struct HostMount(std::path::PathBuf);

impl Drop for HostMount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// M7: a `:ro` bind of a directory with a mount inside it (an NFS
/// automount, say; here a tmpfs the test mounts as root) used to be
/// read-only at the top only, so the container could write the submount;
/// and /sys's submounts (/sys/fs/cgroup, ...) stayed writable. Now every
/// mount below a read-only bind and below /sys is read-only, nosuid and
/// nodev.
#[test]
#[cfg_attr(
    not(berth_it_root),
    ignore = "needs root and the test fixtures: sudo bash tests/setup/setup.sh, then the tests as root"
)]
fn a_read_only_bind_is_read_only_all_the_way_down() {
    let env = need_env!();
    let sb = Sandbox::new(env);
    let data = sb.dir.path().join("data");
    fs::create_dir_all(data.join("sub")).unwrap();
    let st = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "mode=0777", "m7"])
        .arg(data.join("sub"))
        .status()
        .unwrap();
    assert!(st.success(), "mounting the test's tmpfs failed");
    let _guard = HostMount(data.join("sub"));
    sb.chown_to_user(&data);
    let img = image_with_etc(&sb, "m7", "true");
    let bind = format!("{}:/data:ro", data.display());
    let out = sb.run(&[
        "run",
        "-v",
        &bind,
        &img,
        "sh",
        "-c",
        "echo x > /data/sub/planted && echo WROTE-SUB; echo x > /data/top && echo WROTE-TOP; \
         grep -E ' /sys(/| )' /proc/self/mountinfo | while read -r a b c d e f rest; do \
           case $f in ro*) ;; *) echo \"SYS-RW $e\";; esac; done; true",
    ]);
    let all = format!("{}{}", out.stdout(), out.stderr());
    assert_eq!(out.code(), 0, "{all}");
    assert!(
        !all.contains("WROTE-SUB"),
        "the submount was writable: {all}"
    );
    assert!(!all.contains("WROTE-TOP"), "the bind was writable: {all}");
    assert!(!all.contains("SYS-RW"), "a /sys mount is writable: {all}");
    assert!(
        !data.join("sub/planted").exists(),
        "a file was written through the read-only bind"
    );
}

/// berth as real root, in a root-owned directory of its own (store, home,
/// runtime directory): what an admin's `sudo berth` or a root cron job is.
struct AsRoot {
    dir: tempfile::TempDir,
    env: &'static crate::harness::Env,
}

impl AsRoot {
    fn new(env: &'static crate::harness::Env) -> Self {
        let base = std::path::Path::new(env.var("BERTH_IT_DIR")).join("as-root");
        fs::create_dir_all(&base).unwrap();
        let dir = tempfile::Builder::new()
            .prefix("r")
            .tempdir_in(&base)
            .unwrap();
        for sub in ["home", "store", "run", "cwd"] {
            fs::create_dir_all(dir.path().join(sub)).unwrap();
        }
        Self { dir, env }
    }

    /// `berth ARGS` as root, in `cwd`, with a clean environment.
    fn berth(&self, cwd: &std::path::Path, args: &[&str]) -> crate::harness::Out {
        let out = Command::new(&self.env.berth)
            .args(args)
            .env_clear()
            .env("PATH", "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin")
            .env("HOME", self.dir.path().join("home"))
            .env("XDG_RUNTIME_DIR", self.dir.path().join("run"))
            .env("BERTH_STORE", self.dir.path().join("store"))
            .env("BERTH_KEEPER_IDLE", "1")
            .current_dir(cwd)
            .output()
            .unwrap();
        crate::harness::Out(out)
    }

    /// Pulls `berth-test/NAME` from the anonymous registry; returns its id.
    fn pull(&self, name: &str) -> String {
        let r = format!("{}/berth-test/{name}", self.env.anon());
        let out = self
            .berth(self.dir.path(), &["pull", "--tls-verify=false", &r])
            .ok();
        out.stdout()
            .lines()
            .last()
            .unwrap_or_default()
            .trim()
            .to_string()
    }
}

/// M5: a real-root run by id (the first run of an image, the way the Slurm
/// plugin runs every task) gave mount(8) the string `fd:N`, which it took as
/// a path relative to root's cwd: a squashfs planted there as `fd:3` ...
/// became the image. Now the kernel mount gets a loop device configured
/// from the open descriptor.
#[test]
#[cfg_attr(
    not(berth_it_root),
    ignore = "needs root and the test fixtures: sudo bash tests/setup/setup.sh, then the tests as root"
)]
fn a_root_run_by_id_never_mounts_a_file_planted_in_its_cwd() {
    let env = need_env!();
    let root = AsRoot::new(env);
    let id = root.pull("layers:latest");
    assert!(id.starts_with("sha256:"), "{id}");
    let cwd = root.dir.path().join("cwd");
    let evil = root.dir.path().join("evil");
    fs::create_dir_all(evil.join("bin")).unwrap();
    fs::copy("/bin/busybox", evil.join("bin/busybox")).unwrap();
    std::os::unix::fs::symlink("busybox", evil.join("bin/sh")).unwrap();
    for d in ["etc", "proc", "dev", "sys", "tmp"] {
        fs::create_dir_all(evil.join(d)).unwrap();
    }
    fs::write(evil.join("marker"), "PLANTED-IMAGE\n").unwrap();
    let sqfs = root.dir.path().join("evil.sqfs");
    let st = Command::new("mksquashfs")
        .arg(&evil)
        .arg(&sqfs)
        .args(["-quiet", "-noappend", "-no-progress"])
        .status()
        .unwrap();
    assert!(st.success());
    for n in 0..32 {
        fs::copy(&sqfs, cwd.join(format!("fd:{n}"))).unwrap();
    }
    let out = root.berth(
        &cwd,
        &[
            "run",
            "--entrypoint",
            "",
            &id,
            "/bin/sh",
            "-c",
            "cat /marker; ls /layer2.txt",
        ],
    );
    let all = format!("{}{}", out.stdout(), out.stderr());
    assert!(
        !all.contains("PLANTED-IMAGE"),
        "the planted file was mounted: {all}"
    );
    assert_eq!(out.code(), 0, "{all}");
    assert!(out.stdout().contains("/layer2.txt"), "{all}");
}

/// H1: a container of real root was root on the host in many one-step
/// ways (the review's list): root's home, host /tmp and the cwd bound
/// read-write, /proc/sys and sysrq writable, mknod of a disk, writable
/// /sys submounts, host PIDs to kill, root's state in /tmp. Each is tried
/// from inside; each fails now.
#[test]
#[cfg_attr(
    not(berth_it_root),
    ignore = "needs root and the test fixtures: sudo bash tests/setup/setup.sh, then the tests as root"
)]
fn a_root_container_is_no_easier_to_escape_than_podmans_rootful_default() {
    let env = need_env!();
    let root = AsRoot::new(env);
    // By name: the previous berth could not mount a root run by id (M5).
    root.pull("layers:latest");
    let id = format!("{}/berth-test/layers:latest", env.anon());
    let tag = std::process::id();
    let host_tmp = std::path::PathBuf::from(format!("/tmp/berth-h1-{tag}"));
    fs::write(&host_tmp, "HOST-TMP\n").unwrap();
    let root_home = std::path::PathBuf::from(format!("/root/.berth-h1-{tag}"));
    fs::write(&root_home, "ROOT-HOME\n").unwrap();
    let cwd = root.dir.path().join("cwd");
    fs::write(cwd.join("marker"), "HOST-CWD\n").unwrap();
    let me = std::process::id();
    let script = format!(
        "cat {t} /root/.berth-h1-{tag} {c}/marker 2>/dev/null; \
         p=$(cat /proc/sys/kernel/core_pattern); \
         echo \"$p\" > /proc/sys/kernel/core_pattern && echo CORE-PATTERN-WRITTEN; \
         [ -e /proc/sysrq-trigger ] && echo h > /proc/sysrq-trigger && echo SYSRQ-WRITTEN; \
         mknod /dev/berth-disk b 7 0 && echo MKNOD-DONE; \
         mkdir /sys/fs/cgroup/berth-h1 && echo CGROUP-WRITTEN; \
         [ -e /proc/{me} ] && echo HOST-PID-VISIBLE; \
         grep -q ' /dev .*nodev' /proc/self/mountinfo || echo DEV-WITHOUT-NODEV; \
         grep -E '^(CapBnd|Seccomp):' /proc/self/status; \
         touch /tmp/ok && echo TMP-WRITABLE; true",
        t = host_tmp.display(),
        c = cwd.display(),
    );
    let out = root.berth(
        &cwd,
        &["run", "--entrypoint", "", &id, "/bin/sh", "-c", &script],
    );
    let _ = fs::remove_file(&host_tmp);
    let _ = fs::remove_file(&root_home);
    // (A berth without these defences created it on the host.)
    let _ = fs::remove_dir("/sys/fs/cgroup/berth-h1");
    let all = format!("{}{}", out.stdout(), out.stderr());
    assert_eq!(out.code(), 0, "{all}");
    for leak in [
        "HOST-TMP",
        "ROOT-HOME",
        "HOST-CWD",
        "CORE-PATTERN-WRITTEN",
        "SYSRQ-WRITTEN",
        "MKNOD-DONE",
        "CGROUP-WRITTEN",
        "HOST-PID-VISIBLE",
        "DEV-WITHOUT-NODEV",
    ] {
        assert!(!all.contains(leak), "{leak}: {all}");
    }
    // A private, writable /tmp; the seccomp filter on; neither CAP_MKNOD
    // (27) nor CAP_NET_RAW (13) in the bounding set.
    assert!(all.contains("TMP-WRITABLE"), "{all}");
    assert!(all.contains("Seccomp:\t2"), "{all}");
    let bnd = all
        .lines()
        .find_map(|l| l.strip_prefix("CapBnd:"))
        .map(|h| u64::from_str_radix(h.trim(), 16).unwrap())
        .expect("CapBnd");
    assert_eq!(bnd & (1 << 27), 0, "CAP_MKNOD kept: {bnd:x}");
    assert_eq!(bnd & (1 << 13), 0, "CAP_NET_RAW kept: {bnd:x}");
    // Root's state is under /run/berth, not in the bound-nowhere /tmp.
    assert!(
        std::path::Path::new("/run/berth/keepers").is_dir(),
        "no root state in /run/berth"
    );
}

/// L9, L11: under `sudo -E` root's environment is a user's. A user's
/// BERTH_SYSTEM_CONFIG and XDG_CONFIG_HOME naming a hooks directory of
/// theirs, their TMPDIR and XDG_RUNTIME_DIR for root's state, and a PATH
/// with their own `mount`: root used to run the user's hook as root. Now
/// root ignores all of it (and says so); and a root-owned config naming a
/// user's hook file, or a hook file naming a user's program, is refused.
#[test]
#[cfg_attr(
    not(berth_it_root),
    ignore = "needs root and the test fixtures: sudo bash tests/setup/setup.sh, then the tests as root"
)]
fn root_takes_no_config_state_or_programs_from_a_users_environment() {
    let env = need_env!();
    let sb = Sandbox::new(env);
    let root = AsRoot::new(env);
    // By name: the previous berth could not mount a root run by id (M5).
    root.pull("layers:latest");
    let id = format!("{}/berth-test/layers:latest", env.anon());
    let u = sb.dir.path();
    let marker = u.join("ran-as-root");
    let hooks = u.join("hooks.d");
    fs::create_dir_all(&hooks).unwrap();
    fs::create_dir_all(u.join("bin")).unwrap();
    fs::create_dir_all(u.join("tmp")).unwrap();
    fs::create_dir_all(u.join("xdg/berth")).unwrap();
    let evil = u.join("bin/evil.sh");
    fs::write(&evil, format!("#!/bin/sh\nid -u > {}\n", marker.display())).unwrap();
    fs::set_permissions(&evil, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    std::os::unix::fs::symlink(&evil, u.join("bin/mount")).unwrap();
    let hook = serde_json::json!({
        "version": "1.0.0",
        "hook": { "path": evil.to_str().unwrap() },
        "when": { "always": true },
        "stages": ["createRuntime"],
    });
    fs::write(hooks.join("evil.json"), hook.to_string()).unwrap();
    let conf = format!("[host]\nhooks_dirs = [\"{}\"]\n", hooks.display());
    fs::write(u.join("site.toml"), &conf).unwrap();
    fs::write(u.join("xdg/berth/berth.toml"), &conf).unwrap();
    sb.chown_to_user(u);
    let out = Command::new(&env.berth)
        .args(["run", "--entrypoint", "", &id, "/bin/true"])
        .env_clear()
        .env(
            "PATH",
            format!("{}:/usr/bin:/bin:/usr/sbin:/sbin", u.join("bin").display()),
        )
        .env("HOME", sb.home())
        .env("BERTH_SYSTEM_CONFIG", u.join("site.toml"))
        .env("XDG_CONFIG_HOME", u.join("xdg"))
        .env("XDG_RUNTIME_DIR", u.join("run"))
        .env("TMPDIR", u.join("tmp"))
        .env("BERTH_STORE", root.dir.path().join("store"))
        .current_dir(root.dir.path())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !marker.exists(),
        "the user's hook or mount ran as root: {err}"
    );
    assert!(out.status.success(), "{err}");
    assert!(err.contains("ignoring BERTH_SYSTEM_CONFIG"), "{err}");
    assert!(err.contains("ignoring XDG_CONFIG_HOME"), "{err}");
    for d in ["run", "tmp"] {
        let left: Vec<_> = fs::read_dir(u.join(d))
            .map(|r| r.flatten().count())
            .into_iter()
            .collect();
        assert!(
            left.iter().all(|n| *n == 0),
            "root kept state in the user's {d}"
        );
    }

    // A root-owned site config naming the user's hooks directory: the
    // user's hook file is refused, with the reason.
    let with_site = |site: &std::path::Path| {
        let out = Command::new(&env.berth)
            .args(["run", "--entrypoint", "", &id, "/bin/true"])
            .env_clear()
            .env("PATH", "/usr/bin:/bin:/usr/sbin:/sbin")
            .env("BERTH_SYSTEM_CONFIG", site)
            .env("BERTH_STORE", root.dir.path().join("store"))
            .current_dir(root.dir.path())
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let site = root.dir.path().join("site.toml");
    fs::write(&site, &conf).unwrap();
    let (code, err) = with_site(&site);
    assert!(!marker.exists(), "the user's hook ran as root: {err}");
    assert_ne!(code, Some(0), "{err}");
    assert!(err.contains("not trusted as root"), "{err}");

    // A root-owned hook file whose program is the user's: not run.
    let root_hooks = root.dir.path().join("hooks.d");
    fs::create_dir_all(&root_hooks).unwrap();
    fs::write(root_hooks.join("evil.json"), hook.to_string()).unwrap();
    fs::write(
        &site,
        format!("[host]\nhooks_dirs = [\"{}\"]\n", root_hooks.display()),
    )
    .unwrap();
    let (code, err) = with_site(&site);
    assert!(!marker.exists(), "the user's program ran as root: {err}");
    assert_ne!(code, Some(0), "{err}");
    assert!(err.contains("not run as root"), "{err}");
}

/// L3: the PMI descriptor a launcher hands berth is named in `PMI_FD`; it
/// used to be taken from the container's environment, where the image's
/// `Env` can set it, so an image with `PMI_FD=7` kept a socket berth
/// inherited from its caller (a scheduler's connection) open across exec.
/// Now only berth's own environment names it.
#[test]
#[cfg_attr(
    not(berth_it_env),
    ignore = "needs the test fixtures: sudo bash tests/setup/setup.sh"
)]
fn an_images_env_cannot_keep_a_callers_socket_open() {
    let env = need_env!();
    let sb = Sandbox::new(env);
    let img = image_with(&sb, "pmifd", "true", "--config.env PMI_FD=7");
    let run = |pmi: Option<&str>| {
        let mut c = sb.command(
            std::path::Path::new("/usr/bin/python3"),
            &[
                "-c",
                "import os,socket,sys; a,b=socket.socketpair(); os.dup2(a.fileno(),7); \
                 os.set_inheritable(7,True); os.execv(sys.argv[1], sys.argv[1:])",
                env.berth.to_str().unwrap(),
                "run",
                &img,
                "sh",
                "-c",
                "[ -e /proc/self/fd/7 ] && echo FD7-OPEN; echo PMI_FD=$PMI_FD",
            ],
        );
        if let Some(v) = pmi {
            c.env("PMI_FD", v);
        }
        crate::harness::Out(c.output().unwrap())
    };
    let out = run(None);
    let all = format!("{}{}", out.stdout(), out.stderr());
    assert_eq!(out.code(), 0, "{all}");
    assert!(
        !all.contains("FD7-OPEN"),
        "the image kept the caller's socket: {all}"
    );
    // A launcher's own PMI_FD still reaches the rank.
    let out = run(Some("7"));
    let all = format!("{}{}", out.stdout(), out.stderr());
    assert!(
        all.contains("FD7-OPEN"),
        "the launcher's PMI socket was closed: {all}"
    );
}

/// H2, L8: a Dockerfile's RUN step looked for the build worker in /proc
/// (`__build-worker`) and read the user's files through
/// `/proc/WORKER/root`, the host's root. Now the step has its own PID
/// namespace and procfs (no worker there; the worker is not dumpable
/// either), no_new_privs, none of the worker's descriptors, and a /sys that
/// is read-only all the way down.
#[test]
#[cfg_attr(
    not(berth_it_env),
    ignore = "needs the test fixtures: sudo bash tests/setup/setup.sh"
)]
fn a_run_step_cannot_reach_the_build_worker_or_the_host() {
    let env = need_env!();
    let sb = Sandbox::new(env);
    let secret = sb.home().join("secret.txt");
    fs::write(&secret, "HOST-SECRET-0042\n").unwrap();
    let base = format!("{}/berth-test/layers:latest", env.anon());
    let ctx = sb.dir.path().join("ctx-h2");
    fs::create_dir_all(&ctx).unwrap();
    let script = format!(
        "for p in /proc/[0-9]*; do grep -qa '__build-worke[r]' $p/cmdline 2>/dev/null && echo WORKER-SEEN; \
         cat $p/root{s} 2>/dev/null; done; \
         grep -q 'NoNewPrivs:.*1' /proc/self/status || echo NO-NO-NEW-PRIVS; \
         ls -l /proc/$$/fd | grep -- '->' | grep -v -e /dev/ -e pipe: -e 'proc/' | sed 's/^/LEAKED-FD /'; \
         mkdir /sys/fs/cgroup/berth-h2 2>/dev/null && echo SYS-WRITABLE; \
         grep -E ' /sys(/| )' /proc/self/mountinfo | while read -r a b c d e f rest; do \
           case $f in ro*) ;; *) echo SYS-RW $e;; esac; done; echo STEP-RAN",
        s = secret.display()
    );
    fs::write(
        ctx.join("Dockerfile"),
        format!("FROM {base}\nRUN {script}\n"),
    )
    .unwrap();
    sb.chown_to_user(sb.dir.path());
    let out = sb.run(&[
        "build",
        "--tls-verify=false",
        "-t",
        "h2",
        ctx.to_str().unwrap(),
    ]);
    let _ = fs::remove_dir("/sys/fs/cgroup/berth-h2");
    // The step's own output, without the build's echo of its text.
    let log: String = out
        .stderr()
        .lines()
        .filter(|l| !l.starts_with("STEP "))
        .map(|l| format!("{l}\n"))
        .collect();
    assert_eq!(out.code(), 0, "{log}");
    assert!(log.contains("STEP-RAN"), "{log}");
    for bad in [
        "WORKER-SEEN",
        "HOST-SECRET",
        "NO-NO-NEW-PRIVS",
        "LEAKED-FD",
        "SYS-WRITABLE",
        "SYS-RW",
    ] {
        assert!(!log.contains(bad), "{bad}: {log}");
    }
}

/// M1: berth's runtime directory (keeper and container records, the node's
/// image cache) sat under host /tmp, which every container sees: an image
/// could plant a record there that a later run trusted. Now the directory
/// is covered by an empty read-only tmpfs in every container.
#[test]
#[cfg_attr(
    not(berth_it_root),
    ignore = "needs root and the test fixtures: sudo bash tests/setup/setup.sh, then the tests as root"
)]
fn a_container_cannot_see_or_write_berths_runtime_directory() {
    let env = need_env!();
    let sb = Sandbox::new(env);
    let img = image_with_etc(&sb, "m1", "true");
    let state = sb.dir.path().join("run/berth");
    for extra in [&[][..], &["--no-home"][..], &["-v", "/tmp:/scratch"][..]] {
        let mut args = vec!["run"];
        args.extend_from_slice(extra);
        let s = state.display();
        let script = format!(
            "ls {s} /scratch/{rel} 2>/dev/null | grep -v : | grep . && echo STATE-LISTED; \
             mkdir -p {s}/images 2>/dev/null && echo x > {s}/images/planted.json && echo STATE-WRITTEN; \
             true",
            rel = state.strip_prefix("/tmp").unwrap().display()
        );
        args.extend_from_slice(&[&img, "sh", "-c", &script]);
        let out = sb.run(&args);
        let all = format!("{}{}", out.stdout(), out.stderr());
        assert_eq!(out.code(), 0, "{extra:?}: {all}");
        assert!(!all.contains("STATE-LISTED"), "{extra:?}: {all}");
        assert!(!all.contains("STATE-WRITTEN"), "{extra:?}: {all}");
        assert!(!state.join("images/planted.json").exists(), "{extra:?}");
    }
    // Without XDG_RUNTIME_DIR (usual on compute nodes) the directory is
    // $TMPDIR/berth-UID, worked out before berth enters its namespaces
    // (inside them it is uid 0): hidden too.
    let tmpdir = sb.dir.path().join("tmpdir");
    fs::create_dir_all(&tmpdir).unwrap();
    sb.chown_to_user(&tmpdir);
    let (uid, _, _) = sb.env.test_user().clone();
    let state = tmpdir.join(format!("berth-{uid}"));
    let s = state.display();
    let out = sb
        .berth(&[
            "run",
            &img,
            "sh",
            "-c",
            &format!(
                "ls {s} | grep . && echo STATE-LISTED; echo x > {s}/planted && echo STATE-WRITTEN; true"
            ),
        ])
        .env_remove("XDG_RUNTIME_DIR")
        .env("TMPDIR", &tmpdir)
        .output()
        .unwrap();
    let all = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{all}");
    assert!(state.join("keepers").is_dir(), "no state in {s}: {all}");
    assert!(!all.contains("STATE-LISTED"), "{all}");
    assert!(!all.contains("STATE-WRITTEN"), "{all}");
}

/// The default seccomp filter beyond the terminal: kernel keyrings (shared
/// with the caller, not namespaced) and userfaultfd are refused with EPERM;
/// `--security-opt seccomp=unconfined` lifts it.
#[test]
#[cfg_attr(
    not(berth_it_env),
    ignore = "needs the test fixtures: sudo bash tests/setup/setup.sh"
)]
fn the_default_filter_refuses_keyrings_and_userfaultfd() {
    let env = need_env!();
    let sb = Sandbox::new(env);
    sb.pull("debian-python:latest");
    let img = format!("{}/berth-test/debian-python:latest", env.anon());
    let probe = "import ctypes; c = ctypes.CDLL(None, use_errno=True); \
                 r = [c.syscall(250, 0, -3, 0), ctypes.get_errno(), c.syscall(323, 0), ctypes.get_errno()]; \
                 print(*r)";
    let run = |extra: &[&str]| {
        let mut a = vec!["run", "--entrypoint", ""];
        a.extend_from_slice(extra);
        a.extend_from_slice(&[&img, "python3", "-c", probe]);
        sb.run(&a).ok().stdout()
    };
    let filtered = run(&[]);
    assert_eq!(
        filtered.trim(),
        "-1 1 -1 1",
        "keyctl, userfaultfd: {filtered}"
    );
    let open = run(&["--security-opt", "seccomp=unconfined"]);
    let f: Vec<&str> = open.split_whitespace().collect();
    assert!(
        f.first() != Some(&"-1") || f.get(1) != Some(&"1"),
        "keyctl refused without the filter: {open}"
    );
}

/// M6: a store was trusted whoever could write it. A group-writable store
/// (a project store, say) is refused, a group-writable shared store is
/// skipped with a warning; an edited `meta.json` (Entrypoint, Env) no
/// longer changes what runs, since the run configuration comes from the
/// config whose digest is the id, and an edited config.json is refused.
#[test]
#[cfg_attr(
    not(berth_it_env),
    ignore = "needs the test fixtures: sudo bash tests/setup/setup.sh"
)]
fn a_store_others_can_write_or_an_edited_record_is_not_trusted() {
    let env = need_env!();
    let sb = Sandbox::new(env);
    let img = image_with(&sb, "m6", "true", "--config.env GREETING=from-config");
    let chmod = |mode: &str, p: &std::path::Path| {
        assert!(Command::new("chmod")
            .arg(mode)
            .arg(p)
            .status()
            .unwrap()
            .success());
    };
    // meta.json says otherwise: the config wins.
    let dir = sb.squashfs_of(&img).parent().unwrap().to_path_buf();
    let meta_path = dir.join("meta.json");
    let mut meta: serde_json::Value =
        serde_json::from_slice(&fs::read(&meta_path).unwrap()).unwrap();
    meta["run"]["env"] = serde_json::json!(["PATH=/bin", "GREETING=planted", "LD_PRELOAD=/x.so"]);
    chmod("u+w", &meta_path);
    fs::write(&meta_path, serde_json::to_vec(&meta).unwrap()).unwrap();
    chmod("0444", &meta_path);
    let out = sb.run(&["run", &img, "sh", "-c", "echo $GREETING $LD_PRELOAD"]);
    assert_eq!(out.code(), 0, "{}", out.stderr());
    assert_eq!(out.stdout().trim(), "from-config", "{}", out.stdout());
    // An edited config.json: refused.
    let config = dir.join("config.json");
    chmod("u+w", &config);
    let text = fs::read_to_string(&config)
        .unwrap()
        .replace("from-config", "planted");
    fs::write(&config, text).unwrap();
    let out = sb.run(&["run", &img, "true"]);
    assert_ne!(out.code(), 0);
    assert!(
        out.stderr().contains("the store was changed"),
        "{}",
        out.stderr()
    );
    // A group-writable store: refused, with the fix.
    chmod("g+w", &sb.store());
    let out = sb.run(&["run", &img, "true"]);
    assert_eq!(out.code(), 125, "{}", out.stderr());
    assert!(
        out.stderr().contains("writable by its group"),
        "{}",
        out.stderr()
    );
    chmod("g-w", &sb.store());
    // A group-writable shared store: skipped, with a warning.
    let site = Sandbox::new(env);
    let shared_img = image_with(&site, "m6-shared", "true", "");
    chmod("g+w", &site.store());
    fs::write(
        sb.dir.path().join("no-site-config.toml"),
        format!("shared_stores = [\"{}\"]\n", site.store().display()),
    )
    .unwrap();
    let out = sb.run(&["inspect", &shared_img]);
    assert!(
        out.stderr().contains("not using the shared store"),
        "{}",
        out.stderr()
    );
    assert_ne!(out.code(), 0, "{}", out.stdout());
}

/// L4: a `--fakeroot` container was root, with every capability, in the
/// keeper's user namespace: it could enter the keeper's mount namespace (a
/// copy of the host's) or walk `/proc/KEEPER/root` to the user's files past
/// `--no-home`, and remount the prepared root read-write for later runs.
/// Now it is root in a namespace nested in the keeper's (same ids, no
/// capability above), with a keeper of its own.
#[test]
#[cfg_attr(
    not(berth_it_env),
    ignore = "needs the test fixtures: sudo bash tests/setup/setup.sh"
)]
fn a_fakeroot_container_cannot_enter_or_remount_what_its_keeper_holds() {
    let env = need_env!();
    let sb = Sandbox::new(env);
    // Outside every default bind (home, /tmp, the working directory).
    let private = tempfile::Builder::new()
        .prefix("berth-l4-")
        .tempdir_in("/var/tmp")
        .unwrap();
    sb.chown_to_user(private.path());
    let secret = private.path().join("l4-secret.txt");
    fs::write(&secret, "HOME-SECRET-L4\n").unwrap();
    sb.chown_to_user(&secret);
    let img = image_with_etc(&sb, "l4", "true");
    let s = secret.display();
    let script = format!(
        "for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline 2>/dev/null | grep -q '^berth __keeper .* fakeroot ' && k=${{p#/proc/}}; done; \
         [ -n \"$k\" ] || echo NO-KEEPER-SEEN; \
         nsenter -t $k -m cat {s} 2>&1 | grep -q HOME-SECRET && echo ENTERED-KEEPER; \
         cat /proc/$k/root{s} 2>&1 | grep -q HOME-SECRET && echo WALKED-KEEPER-ROOT; \
         id -u"
    );
    let out = sb.run(&["run", "--fakeroot", "--no-home", &img, "sh", "-c", &script]);
    let all = format!("{}{}", out.stdout(), out.stderr());
    assert_eq!(out.code(), 0, "{all}");
    assert!(
        !all.contains("NO-KEEPER-SEEN"),
        "the attack found no keeper: {all}"
    );
    assert!(!all.contains("ENTERED-KEEPER"), "{all}");
    assert!(!all.contains("WALKED-KEEPER-ROOT"), "{all}");
    assert_eq!(out.stdout().lines().last(), Some("0"), "still root: {all}");
    // The prepared root cannot be made writable for the runs after it.
    let out = sb.run(&[
        "run",
        "--fakeroot",
        &img,
        "sh",
        "-c",
        "mount -o remount,rw / 2>/dev/null && echo x > /l4-planted && echo REMOUNTED; true",
    ]);
    assert!(!out.stdout().contains("REMOUNTED"), "{}", out.stdout());
    let out = sb
        .run(&[
            "run",
            "--fakeroot",
            &img,
            "sh",
            "-c",
            "cat /l4-planted 2>&1; true",
        ])
        .ok();
    assert!(
        !out.stdout().lines().any(|l| l.trim() == "x"),
        "{}",
        out.stdout()
    );
    // Identity and fakeroot runs have keepers of their own.
    sb.run(&["run", &img, "sh", "-c", ":"]).ok();
    let keepers: Vec<String> = fs::read_dir(sb.dir.path().join("run/berth/keepers"))
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .collect();
    assert!(
        keepers.iter().any(|k| k.ends_with("-fakeroot"))
            && keepers.iter().any(|k| k.ends_with("-user")),
        "{keepers:?}"
    );
}

/// L5: every default run of an image shares the keeper's prepared root,
/// whose /dev was one writable tmpfs and one devpts: a container could
/// replace `/dev/stdout` or drop files for the next run, and open the pty
/// slaves of another. Now /dev is read-only and each run mounts its own
/// devpts.
#[test]
#[cfg_attr(
    not(berth_it_env),
    ignore = "needs the test fixtures: sudo bash tests/setup/setup.sh"
)]
fn one_container_cannot_change_dev_for_the_next_or_reach_its_terminals() {
    let env = need_env!();
    let sb = Sandbox::new(env);
    sb.pull("debian-python:latest");
    let img = format!("{}/berth-test/debian-python:latest", env.anon());
    let out = sb.run(&[
        "run",
        &img,
        "sh",
        "-c",
        "ln -sf /tmp/x /dev/stdout 2>/dev/null && echo REPLACED; \
         touch /dev/l5-planted 2>/dev/null && echo PLANTED; \
         echo /dev/null works > /dev/null && echo NULL-OK",
    ]);
    let all = format!("{}{}", out.stdout(), out.stderr());
    assert_eq!(out.code(), 0, "{all}");
    assert!(!all.contains("REPLACED"), "{all}");
    assert!(!all.contains("PLANTED"), "{all}");
    assert!(all.contains("NULL-OK"), "device nodes stay writable: {all}");
    let out = sb.run(&["run", &img, "ls", "/dev/l5-planted"]);
    assert_ne!(out.code(), 0, "{}", out.stdout());
    // One run holds a pty; the next sees none of its terminals and still
    // gets its own.
    let mut holder = sb
        .berth(&[
            "run",
            &img,
            "python3",
            "-c",
            "import os, pty, sys, time; m, s = pty.openpty(); print(os.ttyname(s), flush=True); time.sleep(60)",
        ])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(holder.stdout.take().unwrap()),
        &mut line,
    )
    .unwrap();
    assert!(line.starts_with("/dev/pts/"), "{line:?}");
    let out = sb
        .run(&[
            "run",
            &img,
            "python3",
            "-c",
            "import os, pty; print(sorted(os.listdir('/dev/pts'))); m, s = pty.openpty(); print(os.ttyname(s))",
        ])
        .ok();
    let _ = holder.kill();
    let _ = holder.wait();
    let first = out.stdout().lines().next().unwrap_or_default().to_string();
    assert_eq!(
        first,
        "['ptmx']",
        "another run's terminal is visible: {}",
        out.stdout()
    );
    assert!(out.stdout().contains("/dev/pts/0"), "{}", out.stdout());
}

/// L1: `/tmp/berth-UID` has a predictable name, and another user may take
/// it first. berth refuses it (it is not the caller's), and says why and
/// what to do; with `XDG_RUNTIME_DIR` the same run works.
#[test]
#[cfg_attr(
    not(berth_it_root),
    ignore = "needs root and the test fixtures: sudo bash tests/setup/setup.sh, then the tests as root"
)]
fn a_runtime_directory_taken_by_another_user_is_refused_with_the_way_out() {
    let env = need_env!();
    let sb = Sandbox::new(env);
    let img = image_with_etc(&sb, "l1", "true");
    let other = env.var("BERTH_IT_OTHER_USER").to_string();
    let (ouid, ogid) = (
        crate::harness::id_number(&["-u", &other])
            .expect("the second test user (setup.sh makes it)"),
        crate::harness::id_number(&["-g", &other]).unwrap(),
    );
    let (uid, _, _) = sb.env.test_user().clone();
    let tmpdir = sb.dir.path().join("l1-tmp");
    fs::create_dir_all(&tmpdir).unwrap();
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(&tmpdir, fs::Permissions::from_mode(0o1777)).unwrap();
    let taken = tmpdir.join(format!("berth-{uid}"));
    fs::create_dir(&taken).unwrap();
    std::os::unix::fs::chown(&taken, Some(ouid), Some(ogid)).unwrap();
    let out = sb
        .berth(&["run", &img, "sh", "-c", ":"])
        .env_remove("XDG_RUNTIME_DIR")
        .env("TMPDIR", &tmpdir)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "{err}");
    assert!(err.contains("belongs to another user"), "{err}");
    assert!(err.contains("XDG_RUNTIME_DIR"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    let private = sb.dir.path().join("l1-run");
    fs::create_dir_all(&private).unwrap();
    sb.chown_to_user(&private);
    fs::set_permissions(&private, fs::Permissions::from_mode(0o700)).unwrap();
    let out = sb
        .berth(&["run", &img, "sh", "-c", ":"])
        .env("XDG_RUNTIME_DIR", &private)
        .env("TMPDIR", &tmpdir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `--security-opt seccomp=FILE`: a profile in Docker's format replaces the
/// default filter. podman's own profile (a file another tool wrote) runs
/// python, answers a system call it does not list (`add_key`) with its
/// default errno (ENOSYS, where the default filter says EPERM), and refuses an audit
/// netlink socket with its argument rule (EINVAL: no CAP_AUDIT_WRITE in
/// identity mode); a profile of the user's own with an `errnoRet` is
/// obeyed; one that is not a profile is refused before anything runs.
#[test]
#[cfg_attr(
    not(berth_it_env),
    ignore = "needs the test fixtures: sudo bash tests/setup/setup.sh"
)]
fn a_seccomp_profile_from_a_file_replaces_the_default_filter() {
    let env = need_env!();
    let sb = Sandbox::new(env);
    sb.pull("debian-python:latest");
    let img = format!("{}/berth-test/debian-python:latest", env.anon());
    let podmans = std::path::Path::new("/usr/share/containers/seccomp.json");
    let probe = "import ctypes, socket\n\
                 c = ctypes.CDLL(None, use_errno=True)\n\
                 r = [c.syscall(248, 0, 0, 0, 0, 0), ctypes.get_errno()]\n\
                 try:\n  socket.socket(16, socket.SOCK_RAW, 9); r.append('open')\n\
                 except OSError as e:\n  r.append(e.errno)\n\
                 print(*r)";
    let run = |extra: &[&str]| {
        let mut a = vec!["run", "--entrypoint", ""];
        a.extend_from_slice(extra);
        a.extend_from_slice(&[&img, "python3", "-c", probe]);
        sb.run(&a)
    };
    assert_eq!(run(&[]).ok().stdout().trim().split(' ').nth(1), Some("1"));
    if podmans.exists() {
        let opt = format!("seccomp={}", podmans.display());
        let out = run(&["--security-opt", &opt]).ok();
        assert_eq!(out.stdout().trim(), "-1 38 22", "{}", out.stderr());
    } else {
        eprintln!("podman's profile not tried: no {}", podmans.display());
        assert!(!crate::harness::required(), "CI installs podman");
    }
    let mine = sb.dir.path().join("profile.json");
    fs::write(
        &mine,
        r#"{"defaultAction": "SCMP_ACT_ALLOW",
            "syscalls": [{"names": ["mkdir", "mkdirat"], "action": "SCMP_ACT_ERRNO", "errnoRet": 13}]}"#,
    )
    .unwrap();
    let opt = format!("seccomp={}", mine.display());
    let out = sb.run(&[
        "run",
        "--security-opt",
        &opt,
        &img,
        "sh",
        "-c",
        "mkdir /tmp/l13-dir 2>&1; echo rc=$?",
    ]);
    assert!(
        out.stdout().contains("Permission denied"),
        "{}",
        out.stdout()
    );
    assert!(out.stdout().contains("rc=1"), "{}", out.stdout());
    fs::write(&mine, r#"{"syscalls": 3}"#).unwrap();
    sb.run(&["run", "--security-opt", &opt, &img, "true"])
        .fails(125, "not a seccomp profile");
}
