//! berth run by real root (`sudo berth`, a root cron job): its mounts (M5),
//! its containers (H1), and a user's environment under `sudo -E` (L9, L11).

use std::fs;
use std::process::Command;

use crate::harness::Sandbox;
use crate::need_env;

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

/// A squashfs file of `tree` at `file`, made by mksquashfs.
fn mksquashfs(tree: &std::path::Path, file: &std::path::Path) {
    let st = Command::new("mksquashfs")
        .arg(tree)
        .arg(file)
        .args(["-quiet", "-noappend", "-no-progress"])
        .status()
        .unwrap();
    assert!(st.success());
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
    mksquashfs(&evil, &sqfs);
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

/// Real root's squashfs data mount (`-v FILE:DST:sqsh`) goes to the
/// kernel's squashfs driver through a loop device, as its image does.
#[test]
#[cfg_attr(
    not(berth_it_root),
    ignore = "needs root and the test fixtures: sudo bash tests/setup/setup.sh, then the tests as root"
)]
fn a_root_runs_squashfs_data_mount_is_a_kernel_mount() {
    let env = need_env!();
    let root = AsRoot::new(env);
    let id = root.pull("layers:latest");
    let tree = root.dir.path().join("tree");
    fs::create_dir_all(&tree).unwrap();
    fs::write(tree.join("a.txt"), "root's dataset\n").unwrap();
    mksquashfs(&tree, &root.dir.path().join("cwd/ds.sqsh"));
    let out = root.berth(
        &root.dir.path().join("cwd"),
        &[
            "run",
            "--entrypoint",
            "",
            "-v",
            "./ds.sqsh:/ds:sqsh",
            &id,
            "/bin/sh",
            "-c",
            "cat /ds/a.txt; grep ' /ds ' /proc/self/mountinfo",
        ],
    );
    let stdout = out.ok().stdout();
    assert!(stdout.starts_with("root's dataset\n"), "{stdout}");
    assert!(stdout.contains(" - squashfs /dev/loop"), "{stdout}");
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
        // The user's program as fuse-overlayfs, with the kernel's overlay
        // refused: root keeps the kernel's and runs no such program.
        .env("BERTH_FUSE_OVERLAYFS", &evil)
        .env("BERTH_FAULT_REFUSE_OVERLAY", "1")
        .env("BERTH_STORE", root.dir.path().join("store"))
        .current_dir(root.dir.path())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !marker.exists(),
        "the user's hook, mount or fuse-overlayfs ran as root: {err}"
    );
    assert!(err.contains("ignoring BERTH_FUSE_OVERLAYFS"), "{err}");
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
