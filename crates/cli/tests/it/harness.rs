//! Test harness: the fixture environment made by `tests/setup/setup.sh`, a
//! sandbox per test, and the real `berth` binary run as the unprivileged
//! test user.
//!
//! # Skips are declared, never silent passes
//!
//! A test that cannot run on this machine is *ignored* (cargo lists it as
//! such, with the reason), never passed without running. `build.rs`
//! declares what the machine has, as cfgs:
//!
//! - `berth_it_env`: the fixture environment (`$BERTH_IT_DIR/env`, default
//!   `/tmp/berth-it/env`). Every test here needs it and carries
//!   `#[cfg_attr(not(berth_it_env), ignore = "needs the test fixtures: sudo bash tests/setup/setup.sh")]`.
//! - `berth_it_root`: that, and the tests run as root (to mount, to run as
//!   a second user, to be real root): such a test carries
//!   `#[cfg_attr(not(berth_it_root), ignore = "...")]` instead.
//! - `berth_it_slurm`: `berth_it_root`, and berth's SPANK plugin is
//!   installed in the test Slurm (`slurm_spank`).
//!
//! Under `CI` or `BERTH_IT_REQUIRED` (set by `tests/run.sh`) every test is
//! declared runnable. A test that runs does not skip at run time: what it
//! needs and lacks fails it with a message that says how to get it
//! ([`need_env!`], [`Env::var`], [`Env::test_user`]). A check that only
//! a part of a test makes and that needs a tool the fixture may lack (the
//! podman comparisons) says on stderr that it was left out, and fails
//! under `CI` or `BERTH_IT_REQUIRED` ([`required`]).
//!
//! A fixture set up after the tests were built is not seen by `build.rs`
//! (cargo does not watch a missing file without rebuilding every time):
//! [`the_declared_skips_match_this_machine`] fails then, and says to
//! rebuild.

use std::collections::HashMap;
use std::fs;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::OnceLock;

pub use crate::harness_out::Out;

/// The fixture environment.
pub struct Env {
    pub vars: HashMap<String, String>,
    pub berth: PathBuf,
    /// (uid, gid, home) of the test user when running as root.
    pub user: Option<(u32, u32, PathBuf)>,
}

impl Env {
    /// A variable of the fixture environment; a fixture that lacks it
    /// predates the test, which fails saying so.
    pub fn var(&self, k: &str) -> &str {
        self.vars.get(k).map(String::as_str).unwrap_or_else(|| {
            panic!("{k} missing from the fixture env: re-run sudo bash tests/setup/setup.sh")
        })
    }
    /// The test user (uid, gid, home), for a test that needs root (one
    /// marked `cfg_attr(not(berth_it_root), ignore)`): it fails when the
    /// tests do not run as root.
    pub fn test_user(&self) -> &(u32, u32, PathBuf) {
        self.user.as_ref().unwrap_or_else(|| {
            panic!("this test needs root: run the end-to-end tests as root (berth itself then runs as the test user)")
        })
    }
    pub fn fixtures(&self) -> PathBuf {
        PathBuf::from(self.var("BERTH_IT_FIXTURES"))
    }
    pub fn anon(&self) -> &str {
        self.var("BERTH_IT_REG_ANON")
    }
    pub fn auth_reg(&self) -> &str {
        self.var("BERTH_IT_REG_AUTH")
    }
}

fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

fn lookup_user(name: &str) -> Option<(u32, u32, PathBuf)> {
    let passwd = fs::read_to_string("/etc/passwd").ok()?;
    passwd.lines().find_map(|l| {
        let f: Vec<&str> = l.split(':').collect();
        if f.len() >= 6 && f[0] == name {
            Some((f[2].parse().ok()?, f[3].parse().ok()?, PathBuf::from(f[5])))
        } else {
            None
        }
    })
}

/// Where the fixture environment is: `$BERTH_IT_DIR`, default
/// `/tmp/berth-it` (as in `tests/setup/setup.sh` and `build.rs`).
pub fn fixture_dir() -> PathBuf {
    std::env::var_os("BERTH_IT_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/tmp/berth-it"))
}

/// Whether every test must run (`CI` or `BERTH_IT_REQUIRED` is set): a
/// missing fixture or tool is then a failure, not a declared skip.
pub fn required() -> bool {
    std::env::var_os("CI").is_some() || std::env::var_os("BERTH_IT_REQUIRED").is_some()
}

static ENV: OnceLock<Option<Env>> = OnceLock::new();

/// Removes the binary copies (`bin-PID`, 200 MiB each in a debug build)
/// of earlier test processes that are gone and left them over 10 minutes
/// ago (a keeper of theirs may linger a little): without this, every run
/// of the suite left one per test binary, until the disk was full.
fn remove_stale_bin_dirs(dir: &Path) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(pid) = name
            .strip_prefix("bin-")
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        let old = e
            .metadata()
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.elapsed().ok())
            .is_some_and(|age| age > std::time::Duration::from_secs(600));
        if old && !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = fs::remove_dir_all(e.path());
        }
    }
}

/// The environment, or `None` when setup.sh has not run.
fn load_env() -> Option<&'static Env> {
    ENV.get_or_init(|| {
        let dir = fixture_dir();
        let text = fs::read_to_string(dir.join("env")).ok()?;
        let vars: HashMap<String, String> = text
            .lines()
            .filter_map(|l| {
                l.split_once('=')
                    .map(|(k, v)| (k.to_string(), v.to_string()))
            })
            .collect();
        // Copy the binary where the test user can run it (the build tree
        // may sit under a private home).
        let bin_dir = dir.join(format!("bin-{}", std::process::id()));
        remove_stale_bin_dirs(&dir);
        fs::create_dir_all(&bin_dir).unwrap();
        fs::set_permissions(&bin_dir, fs::Permissions::from_mode(0o755)).unwrap();
        let berth = bin_dir.join("berth");
        // BERTH_IT_BIN runs the suite against another build (an older
        // commit's, to see a security test fail before its fix).
        let built = std::env::var_os("BERTH_IT_BIN")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_berth")));
        fs::copy(&built, &berth).unwrap();
        fs::set_permissions(&berth, fs::Permissions::from_mode(0o755)).unwrap();
        let user = if is_root() {
            let name = vars
                .get("BERTH_IT_USER")
                .cloned()
                .unwrap_or_else(|| "berthtest".into());
            Some(
                lookup_user(&name)
                    .unwrap_or_else(|| panic!("test user {name} missing: run setup.sh")),
            )
        } else {
            None
        };
        Some(Env { vars, berth, user })
    })
    .as_ref()
}

/// The fixture environment, for a test declared runnable (see the rule
/// at the top): the test fails when it is missing.
pub fn env() -> &'static Env {
    load_env().unwrap_or_else(|| {
        panic!(
            "{}/env missing: the end-to-end tests need the fixture environment: sudo bash tests/setup/setup.sh (without it, and without CI or BERTH_IT_REQUIRED, they are ignored)",
            fixture_dir().display()
        )
    })
}

/// `build.rs` decided which tests are ignored when this binary was built;
/// a fixture set up since then (the env file, the SPANK plugin) or a run
/// as root of a binary built as another user would leave tests ignored
/// that could run.
#[test]
fn the_declared_skips_match_this_machine() {
    let dir = fixture_dir();
    let rebuild = "touch crates/cli/build.rs (or set BERTH_IT_REQUIRED=1) and run the tests again";
    let has_env = dir.join("env").exists();
    assert!(
        cfg!(berth_it_env) || !has_env,
        "{}/env appeared after the tests were built, which ignore it: {rebuild}",
        dir.display()
    );
    assert!(
        cfg!(berth_it_root) || !(has_env && is_root()),
        "the tests were built as another user than root and run as root: {rebuild}"
    );
    assert!(
        cfg!(berth_it_slurm) || !(has_env && is_root() && slurm_plugin_installed()),
        "the SPANK plugin was installed after the tests were built, which ignore it: {rebuild}"
    );
}

/// `id ARGS` as a number (`id -u NAME`, `id -g NAME`), if it answers one.
pub fn id_number(args: &[&str]) -> Option<u32> {
    let out = Command::new("id").args(args).output().ok()?;
    String::from_utf8_lossy(&out.stdout).trim().parse().ok()
}

/// Whether the SPANK plugin is installed for the test cluster.
pub fn slurm_plugin_installed() -> bool {
    fixture_dir()
        .join("slurm/plugin/libberth_spank.so")
        .exists()
}

/// The fixture environment; the test fails when it is absent (a test
/// that runs was declared runnable: see the rule at the top).
#[macro_export]
macro_rules! need_env {
    () => {
        $crate::harness::env()
    };
}

/// Whether this is tests/run.sh's fallbacks pass (images unpacked, no
/// subordinate ids: owners other than root are root's under --fakeroot).
pub fn fallbacks() -> bool {
    std::env::var_os("BERTH_IT_FALLBACKS").is_some()
}

/// A per-test sandbox: a store and a home, owned by the test user.
pub struct Sandbox {
    pub env: &'static Env,
    pub dir: tempfile::TempDir,
    pub extra_env: Vec<(String, String)>,
}

impl Sandbox {
    pub fn new(env: &'static Env) -> Self {
        let base = PathBuf::from(env.var("BERTH_IT_DIR")).join("sandboxes");
        fs::create_dir_all(&base).unwrap();
        fs::set_permissions(&base, fs::Permissions::from_mode(0o755)).unwrap();
        let dir = tempfile::Builder::new()
            .prefix("t")
            .tempdir_in(&base)
            .unwrap();
        fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o755)).unwrap();
        for sub in ["home", "store", "run"] {
            fs::create_dir_all(dir.path().join(sub)).unwrap();
        }
        let mut sb = Self {
            env,
            dir,
            extra_env: Vec::new(),
        };
        // tests/run.sh's second pass: the fallbacks of nodes without FUSE
        // and users without subordinate ids, forced.
        let mut runtime = String::new();
        if fallbacks() {
            runtime.push_str("image_mount = \"unpack\"\n");
            sb.extra_env.push(("BERTH_NO_SUBIDS".into(), "1".into()));
        }
        // tests/run.sh's fuse-overlayfs pass (BERTH_IT_OVERLAY=fuse).
        if let Ok(overlay) = std::env::var("BERTH_IT_OVERLAY") {
            runtime.push_str(&format!("overlay = \"{overlay}\"\n"));
        }
        if !runtime.is_empty() {
            fs::write(
                sb.dir.path().join("no-site-config.toml"),
                format!("[runtime]\n{runtime}"),
            )
            .unwrap();
        }
        sb.chown_to_user(sb.dir.path());
        sb
    }

    pub fn chown_to_user(&self, path: &Path) {
        if let Some((uid, gid, _)) = &self.env.user {
            let st = Command::new("chown")
                .arg("-R")
                .arg(format!("{uid}:{gid}"))
                .arg(path)
                .status()
                .unwrap();
            assert!(st.success());
        }
    }

    /// Processes whose environment names this sandbox's runtime directory
    /// (every berth process of the sandbox has it: runs, keepers, squashfuse).
    pub fn processes(&self) -> Vec<(i32, String)> {
        let marker = format!("XDG_RUNTIME_DIR={}", self.dir.path().join("run").display());
        fs::read_dir("/proc")
            .unwrap()
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
            .filter(|pid| {
                fs::read(format!("/proc/{pid}/environ"))
                    .map(|env| env.split(|b| *b == 0).any(|v| v == marker.as_bytes()))
                    .unwrap_or(false)
            })
            .map(|pid| {
                let cmd = fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
                (pid, String::from_utf8_lossy(&cmd).replace('\0', " "))
            })
            .collect()
    }

    /// The sandbox's image keeper, if one runs.
    pub fn keeper_pid(&self) -> Option<i32> {
        self.processes()
            .into_iter()
            .find(|(_, c)| c.contains("__keeper"))
            .map(|(p, _)| p)
    }

    /// Waits (up to 20 s) until no keeper of the sandbox runs: they leave
    /// one second after their last run here (`BERTH_KEEPER_IDLE`).
    pub fn wait_keepers_gone(&self) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while self.keeper_pid().is_some() {
            assert!(
                std::time::Instant::now() < deadline,
                "the keeper did not leave"
            );
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    }

    pub fn store(&self) -> PathBuf {
        self.dir.path().join("store")
    }

    pub fn home(&self) -> PathBuf {
        self.dir.path().join("home")
    }

    /// A `berth` command run as the test user with a clean environment.
    pub fn berth(&self, args: &[&str]) -> Command {
        self.command(&self.env.berth, args)
    }

    /// `program` run as the test user with berth's clean environment (an
    /// MPI launcher that starts berth, say).
    pub fn command(&self, program: &Path, args: &[&str]) -> Command {
        let mut c = Command::new(program);
        c.args(args);
        self.clean_env(&mut c);
        if let Some((uid, gid, _)) = &self.env.user {
            c.uid(*uid).gid(*gid);
        }
        c
    }

    /// berth's clean environment for this sandbox, and its directory.
    pub fn clean_env(&self, c: &mut Command) {
        c.env_clear()
            .env("PATH", "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin")
            .env("HOME", self.home())
            .env("XDG_RUNTIME_DIR", self.dir.path().join("run"))
            .env("BERTH_STORE", self.store())
            .env(
                "BERTH_SYSTEM_CONFIG",
                self.dir.path().join("no-site-config.toml"),
            )
            // Keepers of finished tests go away quickly.
            .env("BERTH_KEEPER_IDLE", "1")
            .current_dir(self.dir.path());
        for (k, v) in &self.extra_env {
            c.env(k, v);
        }
    }

    /// The site's MPI module for the Slurm tests: the host's MPICH,
    /// applied with `--mpi` (`--container-modules=mpi`).
    pub fn host_mpich_module(&self) {
        self.module(
            "mpich",
            "when = \"mpi\"\n[mpi]\nlibraries = [\"/usr/lib/x86_64-linux-gnu/libmpich.so.12\"]\n",
        );
    }

    /// The same for the host's Open MPI: the library, and its components,
    /// PMIx, help and configuration at the paths Open MPI was built with.
    pub fn host_openmpi_module(&self) {
        self.module(
            "openmpi",
            "when = \"mpi\"\nbinds = [\"/usr/lib/x86_64-linux-gnu/openmpi:ro\", \"/usr/lib/x86_64-linux-gnu/pmix2:ro\", \"/usr/share/openmpi:ro\", \"/etc/openmpi:ro\"]\n[mpi]\nlibraries = [\"/usr/lib/x86_64-linux-gnu/libmpi.so.40\"]\n",
        );
    }

    /// A site module `NAME` (modules.d/NAME.toml) with `text`.
    pub fn module(&self, name: &str, text: &str) {
        let mods = self.dir.path().join("modules.d");
        fs::create_dir_all(&mods).unwrap();
        fs::write(mods.join(format!("{name}.toml")), text).unwrap();
        self.chown_to_user(&mods);
    }

    /// Runs berth and returns its output.
    pub fn run(&self, args: &[&str]) -> Out {
        let out = self.berth(args).output().unwrap();
        Out(out)
    }

    /// `berth build -t TAG CONTEXT` (its base from the plain-HTTP test
    /// registry).
    pub fn build(&self, tag: &str, context: &Path) -> Out {
        self.run(&[
            "build",
            "--tls-verify=false",
            "-t",
            tag,
            &context.to_string_lossy(),
        ])
    }

    /// Pulls an image of the anonymous registry (`berth-test/NAME`).
    pub fn pull(&self, name: &str) -> Out {
        let r = format!("{}/berth-test/{name}", self.env.anon());
        self.run(&["pull", "--tls-verify=false", &r]).ok()
    }

    /// Pulls `berth-test/NAME` of the anonymous registry and returns the
    /// reference, for `berth run`.
    pub fn pulled(&self, name: &str) -> String {
        self.pull(name);
        format!("{}/berth-test/{name}", self.env.anon())
    }

    /// The test image of layers (hard links, whiteouts, owners), pulled.
    pub fn layers(&self) -> String {
        self.pulled("layers:latest")
    }

    /// The Debian + python3 test image, pulled.
    pub fn debian(&self) -> String {
        self.pulled("debian-python:latest")
    }

    /// `berth run [EXTRA] IMAGE /bin/sh -c SCRIPT` with the entrypoint
    /// cleared.
    pub fn sh(&self, image: &str, extra: &[&str], script: &str) -> Out {
        let mut args = vec!["run", "--entrypoint", ""];
        args.extend_from_slice(extra);
        args.extend_from_slice(&[image, "/bin/sh", "-c", script]);
        self.run(&args)
    }

    /// Runs berth with `input` on its standard input.
    pub fn run_with_input(&self, args: &[&str], input: &str) -> Out {
        let mut child = self
            .berth(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(input.as_bytes())
            .unwrap();
        Out(child.wait_with_output().unwrap())
    }

    /// `berth login --password-stdin` to `registry` as the fixture's
    /// registry user, with `password` on standard input.
    pub fn login(&self, registry: &str, password: &str) -> Out {
        self.run_with_input(
            &[
                "login",
                "--tls-verify=false",
                "-u",
                self.env.var("BERTH_IT_REG_USER"),
                "--password-stdin",
                registry,
            ],
            &format!("{password}\n"),
        )
    }

    /// Asserts that the store's tmp/ holds nothing (no work directory left
    /// behind by an interrupted or failed command).
    pub fn assert_store_tmp_empty(&self) {
        let left = self.store_entries("tmp");
        assert!(left.is_empty(), "left in the store's tmp/: {left:?}");
    }

    /// Starts `count` berth commands at once, the `i`th with `args(i)`,
    /// their output piped (for [`outputs`]).
    pub fn spawn_berths(&self, count: usize, args: impl Fn(usize) -> Vec<String>) -> Vec<Child> {
        (0..count)
            .map(|i| {
                let args = args(i);
                let args: Vec<&str> = args.iter().map(String::as_str).collect();
                self.berth(&args)
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .spawn()
                    .unwrap()
            })
            .collect()
    }

    /// A `podman` command run as the test user, with the fixture's podman
    /// state; `None` when the fixture has no podman.
    pub fn podman(&self, args: &[&str]) -> Option<Out> {
        let home = self.env.vars.get("BERTH_IT_PODMAN_HOME")?;
        let home = Path::new(home);
        let mut c = Command::new("podman");
        c.args(args)
            .env_clear()
            .env("PATH", "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin")
            .env("HOME", self.home())
            .env("XDG_CONFIG_HOME", home.join("config"))
            .env("XDG_DATA_HOME", home.join("data"))
            .env("XDG_RUNTIME_DIR", home.join("runtime"))
            .current_dir(self.dir.path());
        if let Some((uid, gid, _)) = &self.env.user {
            c.uid(*uid).gid(*gid);
        }
        Some(Out(c.output().unwrap()))
    }

    /// The squashfs file of an image, from `berth inspect`.
    pub fn squashfs_of(&self, image: &str) -> PathBuf {
        let j = self.run(&["inspect", image]).ok().json();
        PathBuf::from(j["squashfs"]["path"].as_str().unwrap())
    }

    /// Entries (files and dirs) under the store's tmp/ and images/.
    pub fn store_entries(&self, sub: &str) -> Vec<String> {
        match fs::read_dir(self.store().join(sub)) {
            Ok(rd) => rd
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect(),
            Err(_) => vec![],
        }
    }
}

/// Waits for `children` (from [`Sandbox::spawn_berths`]) and returns their
/// outputs, in order.
pub fn outputs(children: Vec<Child>) -> Vec<Out> {
    children
        .into_iter()
        .map(|c| Out(c.wait_with_output().unwrap()))
        .collect()
}

/// Reads `child`'s standard output up to a line `ready` (the command
/// prints it once it is set up: a signal handler installed, say), so the
/// test acts then and not after a guessed sleep. The rest of the output
/// stays readable.
pub fn wait_ready(child: &mut Child) -> BufReader<ChildStdout> {
    let stdout = child.stdout.take().expect("stdout piped");
    let mut reader = BufReader::new(stdout);
    let mut line = String::new();
    loop {
        line.clear();
        let n = reader.read_line(&mut line).unwrap();
        assert!(n > 0, "the command ended before it was ready");
        if line.trim_end() == "ready" {
            return reader;
        }
    }
}

/// Unpacks a squashfs file with `unsquashfs` (as root: owners kept).
pub fn unsquash(file: &Path, dest: &Path) {
    let st = Command::new("unsquashfs")
        .arg("-q")
        .arg("-no-progress")
        .arg("-d")
        .arg(dest)
        .arg(file)
        .stdout(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(st.success(), "unsquashfs failed on {}", file.display());
}
