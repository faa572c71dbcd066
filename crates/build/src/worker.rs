//! The build worker, `berth __build-worker PLAN`: a fresh berth process that
//! enters a user namespace where the caller is root (with the subordinate
//! id range from /etc/subuid when there is one, so apt-get and dpkg can
//! chown), builds each needed stage's root under the plan's work directory
//! and runs its steps: RUN in a mount namespace pivoted into the root (the
//! host's network, /proc, a few /dev nodes, the host's resolv.conf), COPY
//! and ADD in a child chrooted into the root (so destinations resolve
//! symlinks inside the image). Each step's changes become a layer blob and
//! a build-cache entry. Steps the cache has are not run; their layers are
//! applied only when a later step needs the root.

use std::fs;
use std::io::Read;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;

use berth_runtime::rootfs::{self, Layers, Profile, RootfsPlan};
use berth_runtime::sys::{self, Fork, Kernel, LINUX};

use crate::blobs::{BlobRef, Blobs};
use crate::context::{self, Ignore};
use crate::layer::{self, Snapshot};
use crate::plan::{Action, Base, CacheEntry, CopyFrom, Plan};
use crate::{Error, Result};

/// Exit code of the worker when a RUN step fails (its own code is printed).
pub const EXIT_STEP_FAILED: i32 = 3;

/// Entry point of `berth __build-worker PLAN`.
pub fn main(args: &[String]) -> i32 {
    let [plan] = args else {
        eprintln!("berth: error: usage: berth __build-worker PLAN");
        return 125;
    };
    let result = run(Path::new(plan));
    // Stage roots hold files of the image's owners (subordinate ids): only
    // this namespace can remove them.
    if let Some(work) = Path::new(plan).parent() {
        if let Ok(dir) = fs::read_dir(work) {
            let stages: Vec<PathBuf> = dir
                .flatten()
                .filter(|e| e.file_name().to_string_lossy().starts_with("stage"))
                .map(|e| e.path())
                .collect();
            // Overlay roots and their FUSE lower layers first.
            for p in &stages {
                let _ = LINUX.unmount(p, libc::MNT_DETACH);
            }
            for p in &stages {
                let _ = fs::remove_dir_all(p);
            }
        }
    }
    match result {
        Ok(()) => 0,
        Err(Error::StepFailed { .. }) => EXIT_STEP_FAILED,
        Err(e) => {
            eprintln!("berth: error: {e}");
            125
        }
    }
}

struct StageState {
    root: PathBuf,
    /// The overlay's upper directory, when the root is an overlay.
    upper: Option<PathBuf>,
    ready: bool,
    pending: Vec<BlobRef>,
}

fn run(plan_path: &Path) -> Result<()> {
    let plan: Plan =
        serde_json::from_slice(&fs::read(plan_path).map_err(|e| Error::io("read", plan_path, e))?)
            .map_err(|e| Error::Plan(e.to_string()))?;
    berth_runtime::idmap::enter_namespaces(&LINUX, berth_runtime::IdMode::FakeRoot)
        .map_err(|e| Error::Plan(format!("cannot enter the build's user namespace: {e}")))?;
    let full_map = fs::read_to_string("/proc/self/uid_map")
        .map(|m| m.lines().count() > 1)
        .unwrap_or(false);
    // The worker's memory belongs to the initial user namespace (it was
    // executed there): not dumpable, RUN steps (root of the build's
    // namespace only) cannot open its /proc files, its root (the host's)
    // among them. They also get their own PID namespace (sandbox_exec).
    let _ = rustix::process::set_dumpable_behavior(rustix::process::DumpableBehavior::NotDumpable);
    if !full_map {
        eprintln!(
            "berth: note: no subordinate id range for you in /etc/subuid and /etc/subgid (or no newuidmap): \
             the build maps only your own id, so files keep root as owner and steps that chown to other users fail"
        );
    }
    let blobs = Blobs::new(&plan.blobs)?;
    let mut states: Vec<StageState> = plan
        .stages
        .iter()
        .enumerate()
        .map(|(i, _)| StageState {
            root: plan.work.join(format!("stage{i}")),
            upper: None,
            ready: false,
            pending: Vec::new(),
        })
        .collect();
    let total: usize = plan
        .stages
        .iter()
        .filter(|s| s.needed)
        .map(|s| s.steps.len())
        .sum();
    let mut n = 0;
    for (i, stage) in plan.stages.iter().enumerate() {
        if !stage.needed {
            continue;
        }
        eprintln!("[{}/{}] {}", i + 1, plan.stages.len(), stage.title);
        if let Base::Stage(j) = stage.base {
            // Its layers are the earlier stage's, then its own.
            states[i].pending = states[j].pending.clone();
        }
        for step in &stage.steps {
            n += 1;
            if let Some(hit) = &step.cached {
                eprintln!(
                    "STEP {n}/{total} (line {}): {} (cached)",
                    step.line, step.text
                );
                states[i].pending.extend(hit.layer.clone());
                continue;
            }
            eprintln!("STEP {n}/{total} (line {}): {}", step.line, step.text);
            let t0 = std::time::Instant::now();
            ensure(&plan, &mut states, i, full_map)?;
            let root = states[i].root.clone();
            // What to walk for changes: the overlay's upper directory (only
            // what the build changed), else the whole root.
            let scan = states[i].upper.clone().unwrap_or_else(|| root.clone());
            let t1 = std::time::Instant::now();
            let before = Snapshot::take(&scan)?;
            let t2 = std::time::Instant::now();
            match &step.action {
                Action::Run {
                    argv,
                    env,
                    workdir,
                    user,
                } => {
                    let code = run_step(&root, argv, env, workdir, user)?;
                    if code != 0 {
                        eprintln!(
                            "berth: error: Dockerfile line {}: {} failed with exit code {code}",
                            step.line, step.text
                        );
                        return Err(Error::StepFailed {
                            line: step.line,
                            code,
                        });
                    }
                }
                Action::Copy {
                    from,
                    sources,
                    dest,
                    chown,
                    chmod,
                    add,
                } => {
                    let (src_root, ignore) = match from {
                        CopyFrom::Context => (plan.context.clone(), Ignore::load(&plan.context)),
                        CopyFrom::Stage(j) => {
                            ensure(&plan, &mut states, *j, full_map)?;
                            (states[*j].root.clone(), Ignore::default())
                        }
                    };
                    copy_step(
                        &root,
                        &src_root,
                        &ignore,
                        sources,
                        dest,
                        chown.as_deref(),
                        *chmod,
                        *add,
                    )
                    .map_err(|e| Error::Step {
                        line: step.line,
                        msg: e.to_string(),
                    })?;
                }
                Action::Mkdir { path } => {
                    let p = context::inside(&root, path);
                    if !p.is_dir() {
                        in_root(&root, &mut || {
                            fs::create_dir_all(path).map_err(|e| e.to_string())
                        })
                        .map_err(|msg| Error::Step {
                            line: step.line,
                            msg,
                        })?;
                    }
                }
            }
            let t3 = std::time::Instant::now();
            let layer = layer::diff(&scan, &before, &blobs, states[i].upper.is_some())?;
            if std::env::var_os("BERTH_TIMING").is_some() {
                eprintln!(
                    "berth: timing: root {:?}, snapshot {:?}, step {:?}, layer {:?}",
                    t1 - t0,
                    t2 - t1,
                    t3 - t2,
                    t3.elapsed()
                );
            }
            let entry = CacheEntry { layer };
            entry
                .save(&plan.cache, &step.key)
                .map_err(|e| Error::io("write the cache entry", &plan.cache, e))?;
        }
    }
    Ok(())
}

/// Makes stage `i`'s root real: its base, then the layers of cached steps.
fn ensure(plan: &Plan, states: &mut [StageState], i: usize, full_map: bool) -> Result<()> {
    if states[i].ready {
        return Ok(());
    }
    let root = states[i].root.clone();
    let base_layers_from_stage = match plan.stages[i].base {
        Base::Stage(j) => {
            ensure(plan, states, j, full_map)?;
            let src = states[j].root.clone();
            let st = Command::new("cp")
                .args(["-a", "--reflink=auto"])
                .arg(&src)
                .arg(&root)
                .status()
                .map_err(|e| Error::io("run cp for", &root, e))?;
            if !st.success() {
                return Err(Error::Plan(format!("cannot copy stage {j}'s root")));
            }
            // The earlier stage's layers are in its root already.
            states[j].pending.len()
        }
        Base::Scratch => {
            fs::create_dir_all(&root).map_err(|e| Error::io("create", &root, e))?;
            0
        }
        Base::Image(ref sqfs) => {
            match overlay_root(sqfs, &root) {
                Ok(upper) => states[i].upper = Some(upper),
                Err(why) => {
                    // No FUSE or no unprivileged overlay here: a plain copy.
                    if std::env::var_os("BERTH_TIMING").is_some() {
                        eprintln!(
                            "berth: timing: no overlay build root ({why}); unpacking the base"
                        );
                    }
                    unpack_base(sqfs, &root, full_map)?;
                }
            }
            0
        }
    };
    let pending: Vec<BlobRef> = states[i]
        .pending
        .iter()
        .skip(base_layers_from_stage)
        .cloned()
        .collect();
    let blobs = Blobs::new(&plan.blobs)?;
    for b in &pending {
        layer::apply(&root, &blobs.path(&b.digest))?;
    }
    states[i].ready = true;
    Ok(())
}

/// The stage root as an overlay: the base image's squashfs mounted through
/// FUSE as the lower layer (nothing unpacked), an upper directory beside
/// the root for the build's changes. The worker's mount namespace holds
/// both mounts; they go with it.
fn overlay_root(sqfs: &Path, root: &Path) -> std::result::Result<PathBuf, String> {
    let dir = |suffix: &str| {
        let mut name = root.file_name().unwrap_or_default().to_os_string();
        name.push(suffix);
        root.with_file_name(name)
    };
    let (lower, upper, work) = (dir("-lower"), dir("-upper"), dir("-work"));
    for d in [root, &lower, &upper, &work] {
        fs::create_dir_all(d).map_err(|e| format!("create {}: {e}", d.display()))?;
    }
    let image = fs::File::open(sqfs).map_err(|e| format!("open {}: {e}", sqfs.display()))?;
    let server = berth_runtime::image_mount::mount_fuse(&LINUX, &image, &lower, 0, 0)
        .map_err(|e| e.to_string())?;
    // The server lives as long as the connection; nothing waits for it.
    std::mem::forget(server);
    let opts = format!(
        "lowerdir={},upperdir={},workdir={},userxattr",
        lower.display(),
        upper.display(),
        work.display()
    );
    LINUX
        .mount(
            Some(Path::new("overlay")),
            root,
            Some("overlay"),
            0,
            Some(&opts),
        )
        .map_err(|e| {
            let _ = LINUX.unmount(&lower, libc::MNT_DETACH);
            format!("overlay on {}: {e}", root.display())
        })?;
    Ok(upper)
}

/// Unpacks a base image's squashfs into `root` with its owners:
/// `unsquashfs` (squashfs-tools, multi-threaded: 3 x faster than
/// `rdsquashfs` on the Debian base here, 0.63 s against 2.0 s), else
/// `rdsquashfs` (squashfs-tools-ng, which berth needs anyway).
fn unpack_base(sqfs: &Path, root: &Path, full_map: bool) -> Result<()> {
    let mut cmd = Command::new("unsquashfs");
    cmd.args(["-q", "-n", "-no-xattrs", "-f", "-d"]).arg(root);
    if !full_map {
        // Owners cannot be set with one id mapped: everything is root's.
        cmd.arg("-ignore-errors");
    }
    let out = match cmd.arg(sqfs).stdout(std::process::Stdio::null()).output() {
        Ok(out) => out,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let mut cmd = Command::new("rdsquashfs");
            cmd.args(["-u", "/", "-p"])
                .arg(root)
                .args(["-C", "-T", "-D", "-S"]);
            if full_map {
                cmd.arg("-O");
            }
            cmd.arg(sqfs)
                .stdout(std::process::Stdio::null())
                .output()
                .map_err(|e| Error::io("run unsquashfs or rdsquashfs for", sqfs, e))?
        }
        Err(e) => return Err(Error::io("run unsquashfs for", sqfs, e)),
    };
    if !out.status.success() {
        return Err(Error::Plan(format!(
            "cannot unpack the base image {}: {}",
            sqfs.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(())
}

/// Runs `f` in a forked child chrooted into `root` (paths it uses resolve
/// in the image); its error text comes back.
fn in_root(
    root: &Path,
    f: &mut dyn FnMut() -> std::result::Result<(), String>,
) -> std::result::Result<(), String> {
    let (r, w) = rustix::pipe::pipe().map_err(|e| e.to_string())?;
    let (mut r, w) = (fs::File::from(r), fs::File::from(w));
    match sys::fork().map_err(|e| e.to_string())? {
        Fork::Child => {
            drop(r);
            let result = rustix::process::chroot(root)
                .map_err(|e| format!("chroot: {e}"))
                .and_then(|_| std::env::set_current_dir("/").map_err(|e| e.to_string()))
                .and_then(|_| f());
            let code = match result {
                Ok(()) => 0,
                Err(msg) => {
                    use std::io::Write;
                    let mut w = w;
                    let _ = w.write_all(msg.as_bytes());
                    1
                }
            };
            sys::exit_now(code)
        }
        Fork::Parent(pid) => {
            drop(w);
            let mut msg = String::new();
            let _ = r.read_to_string(&mut msg);
            match sys::wait(pid, false) {
                Ok(Some((_, sys::Exit::Code(0)))) => Ok(()),
                _ if !msg.is_empty() => Err(msg),
                other => Err(format!("the step's helper ended with {other:?}")),
            }
        }
    }
}

/// A RUN step: a child in its own mount namespace, pivoted into `root`.
fn run_step(
    root: &Path,
    argv: &[String],
    env: &[(String, String)],
    workdir: &str,
    user: &str,
) -> Result<i32> {
    // Mount points the step needs and the image may lack; removed after if
    // they were made here.
    let mut made = Vec::new();
    for d in ["proc", "dev", "sys", "etc"] {
        let p = root.join(d);
        if fs::symlink_metadata(&p).is_err() {
            fs::create_dir(&p).map_err(|e| Error::io("create", &p, e))?;
            made.push(p);
        }
    }
    let mut made_files = Vec::new();
    for f in ["etc/resolv.conf", "etc/hosts"] {
        let p = root.join(f);
        if fs::symlink_metadata(&p).is_err() {
            fs::write(&p, "").map_err(|e| Error::io("create", &p, e))?;
            made_files.push(p);
        }
    }
    let code = match sys::fork().map_err(|e| Error::io("fork for", root, e))? {
        Fork::Child => {
            let err = sandbox_exec(root, argv, env, workdir, user);
            eprintln!("berth: error: {err}");
            sys::exit_now(126)
        }
        Fork::Parent(pid) => match sys::wait(pid, false) {
            Ok(Some((_, exit))) => exit.as_code(),
            _ => 125,
        },
    };
    for f in made_files {
        if fs::metadata(&f).is_ok_and(|m| m.len() == 0) {
            let _ = fs::remove_file(f);
        }
    }
    for d in made.into_iter().rev() {
        let _ = fs::remove_dir(d);
    }
    Ok(code)
}

/// In the RUN child: its own mount and PID namespaces, the step's root
/// assembled by the runtime's rootfs (profile `BuildStep`: a fresh /proc,
/// /sys read-only all the way down, a minimal /dev with its own /dev/shm,
/// the host's resolv.conf and hosts, every target resolved inside the
/// root) and pivoted into, then the user and `exec`. Returns only on
/// failure.
fn sandbox_exec(
    root: &Path,
    argv: &[String],
    env: &[(String, String)],
    workdir: &str,
    user: &str,
) -> String {
    use rustix::thread::UnshareFlags;
    let k: &dyn Kernel = &LINUX;
    let step = || -> std::result::Result<std::convert::Infallible, String> {
        // Its own PID namespace and procfs: the worker, the base image's
        // squashfs server and the user's other processes are not in it, so
        // /proc/PID/root cannot lead out.
        k.unshare(UnshareFlags::NEWNS | UnshareFlags::NEWPID)
            .map_err(|e| format!("unshare: {e}"))?;
        if let Fork::Parent(init) = sys::fork().map_err(|e| format!("fork: {e}"))? {
            let code = match sys::wait(init, false) {
                Ok(Some((_, exit))) => exit.as_code(),
                _ => 125,
            };
            sys::exit_now(code);
        }
        let plan = RootfsPlan {
            profile: Profile::BuildStep,
            layers: Layers::Directory(root),
            fresh_proc: true,
            binds: &[],
            passwd_line: None,
            group_line: None,
            workdir,
            confined: false,
            hidden: None,
        };
        rootfs::assemble(k, &plan).map_err(|e| e.to_string())?;
        fs::create_dir_all(workdir).map_err(|e| format!("working directory {workdir}: {e}"))?;
        std::env::set_current_dir(workdir)
            .map_err(|e| format!("working directory {workdir}: {e}"))?;
        let (uid, gid, home) = resolve_user(user)?;
        let mut env = env.to_vec();
        if !env.iter().any(|(k, _)| k == "HOME") {
            env.push(("HOME".into(), home));
        }
        if uid != 0 || gid != 0 {
            let _ = rustix::thread::set_thread_groups(&[rustix::fs::Gid::from_raw(gid)]);
            rustix::thread::set_thread_res_gid(
                rustix::fs::Gid::from_raw(gid),
                rustix::fs::Gid::from_raw(gid),
                rustix::fs::Gid::from_raw(gid),
            )
            .map_err(|e| format!("USER {user}: cannot become group {gid}: {e}"))?;
            rustix::thread::set_thread_res_uid(
                rustix::fs::Uid::from_raw(uid),
                rustix::fs::Uid::from_raw(uid),
                rustix::fs::Uid::from_raw(uid),
            )
            .map_err(|e| format!("USER {user}: cannot become user {uid}: {e}"))?;
        }
        // The step's output is the build's log: on stderr, so that stdout
        // carries only the image id.
        let _ = rustix::stdio::dup2_stdout(rustix::stdio::stderr());
        // No setuid elevation, and nothing the worker holds open (blob
        // files, the plan, the build's lock) reaches the step.
        k.set_no_new_privs()
            .map_err(|e| format!("no_new_privs: {e}"))?;
        sys::fds::cloexec_all_but(&[]);
        use std::os::unix::process::CommandExt;
        let err = Command::new(&argv[0])
            .args(&argv[1..])
            .env_clear()
            .envs(env)
            .exec();
        Err(format!("cannot run {:?}: {err}", argv[0]))
    };
    match step() {
        Ok(never) => match never {},
        Err(e) => e,
    }
}

/// `USER` or `--chown` as ids: `name|uid[:group|gid]`, names from the
/// image's /etc/passwd and /etc/group (the current root); and the home.
fn resolve_user(spec: &str) -> std::result::Result<(u32, u32, String), String> {
    if spec.is_empty() {
        return Ok((0, 0, "/root".into()));
    }
    let (u, g) = match spec.split_once(':') {
        Some((u, g)) => (u, Some(g)),
        None => (spec, None),
    };
    let passwd = fs::read_to_string("/etc/passwd").unwrap_or_default();
    let entry = passwd
        .lines()
        .map(|l| l.split(':').collect::<Vec<_>>())
        .find(|f| f.len() >= 6 && (f[0] == u || f[2] == u));
    let uid: u32 = match (&entry, u.parse::<u32>()) {
        (_, Ok(n)) => n,
        (Some(f), _) => f[2]
            .parse()
            .map_err(|_| format!("bad /etc/passwd entry for {u}"))?,
        (None, _) => return Err(format!("user {u:?} is not in the image's /etc/passwd")),
    };
    let home = entry
        .as_ref()
        .map(|f| f[5].to_string())
        .unwrap_or_else(|| "/".into());
    let gid: u32 = match g {
        None => entry
            .as_ref()
            .and_then(|f| f[3].parse().ok())
            .unwrap_or(uid),
        Some(g) => match g.parse::<u32>() {
            Ok(n) => n,
            Err(_) => {
                let group = fs::read_to_string("/etc/group").unwrap_or_default();
                group
                    .lines()
                    .map(|l| l.split(':').collect::<Vec<_>>())
                    .find(|f| f.len() >= 3 && f[0] == g)
                    .and_then(|f| f[2].parse().ok())
                    .ok_or_else(|| format!("group {g:?} is not in the image's /etc/group"))?
            }
        },
    };
    Ok((uid, gid, home))
}

/// COPY/ADD: in a child chrooted into `root` whose working directory is
/// `src_root`, so sources are relative paths and the destination an
/// absolute one resolved inside the image.
#[allow(clippy::too_many_arguments)]
fn copy_step(
    root: &Path,
    src_root: &Path,
    ignore: &Ignore,
    sources: &[String],
    dest: &str,
    chown: Option<&str>,
    chmod: Option<u32>,
    add: bool,
) -> Result<()> {
    let mut matches = Vec::new();
    for s in sources {
        matches.extend(context::expand_source(src_root, s, ignore)?);
    }
    let into_dir = dest.ends_with('/') || matches.len() > 1;
    let src = fs::File::open(src_root).map_err(|e| Error::io("open", src_root, e))?;
    in_root(root, &mut || {
        let owner = match chown {
            Some(spec) => {
                let (u, g, _) = resolve_user(spec)?;
                Some((u, g))
            }
            None => None,
        };
        rustix::process::fchdir(&src).map_err(|e| format!("enter the sources: {e}"))?;
        let dest_is_dir = into_dir || Path::new(dest).is_dir();
        for m in &matches {
            // Read from the source resolved inside its root (the context or
            // the stage), named as written.
            let rel = if m.src.is_empty() {
                ".".to_string()
            } else {
                m.src.clone()
            };
            let name = Path::new(&m.rel).file_name().unwrap_or_default();
            let meta = fs::symlink_metadata(&rel).map_err(|e| format!("{rel}: {e}"))?;
            if meta.is_dir() {
                // A destination directory the copy creates belongs to the
                // --chown owner too (BuildKit's rule), so a later USER can
                // write in it.
                let created = !Path::new(dest).exists();
                fs::create_dir_all(dest).map_err(|e| format!("{dest}: {e}"))?;
                if let (true, Some((u, g))) = (created, owner) {
                    std::os::unix::fs::lchown(dest, Some(u), Some(g))
                        .map_err(|e| format!("chown {dest}: {e}"))?;
                }
                copy_children(
                    Path::new(&rel),
                    Path::new(dest),
                    owner,
                    chmod,
                    ignore,
                    &m.src,
                )?;
            } else if add && meta.is_file() && is_tar(Path::new(&rel)) {
                fs::create_dir_all(dest).map_err(|e| format!("{dest}: {e}"))?;
                unpack_tar(Path::new(&rel), Path::new(dest))?;
            } else {
                let target = if dest_is_dir {
                    fs::create_dir_all(dest).map_err(|e| format!("{dest}: {e}"))?;
                    Path::new(dest).join(name)
                } else {
                    if let Some(p) = Path::new(dest).parent() {
                        fs::create_dir_all(p).map_err(|e| format!("{}: {e}", p.display()))?;
                    }
                    PathBuf::from(dest)
                };
                copy_one(Path::new(&rel), &target, &meta, owner, chmod)?;
            }
        }
        Ok(())
    })
    .map_err(Error::Source)
}

fn copy_children(
    src: &Path,
    dst: &Path,
    owner: Option<(u32, u32)>,
    chmod: Option<u32>,
    ignore: &Ignore,
    rel: &str,
) -> std::result::Result<(), String> {
    let mut names: Vec<_> = fs::read_dir(src)
        .map_err(|e| format!("{}: {e}", src.display()))?
        .flatten()
        .map(|e| e.file_name())
        .collect();
    names.sort();
    for name in names {
        let child_rel = if rel.is_empty() {
            name.to_string_lossy().to_string()
        } else {
            format!("{rel}/{}", name.to_string_lossy())
        };
        if ignore.excludes(&child_rel) {
            continue;
        }
        let s = src.join(&name);
        let d = dst.join(&name);
        let meta = fs::symlink_metadata(&s).map_err(|e| format!("{}: {e}", s.display()))?;
        if meta.is_dir() {
            if !d.is_dir() {
                fs::create_dir(&d).map_err(|e| format!("{}: {e}", d.display()))?;
            }
            copy_children(&s, &d, owner, chmod, ignore, &child_rel)?;
            finish(&d, &meta, owner, chmod)?;
        } else {
            copy_one(&s, &d, &meta, owner, chmod)?;
        }
    }
    Ok(())
}

fn copy_one(
    src: &Path,
    dst: &Path,
    meta: &fs::Metadata,
    owner: Option<(u32, u32)>,
    chmod: Option<u32>,
) -> std::result::Result<(), String> {
    if let Ok(m) = fs::symlink_metadata(dst) {
        if !m.is_dir() {
            let _ = fs::remove_file(dst);
        }
    }
    if meta.file_type().is_symlink() {
        let t = fs::read_link(src).map_err(|e| format!("{}: {e}", src.display()))?;
        std::os::unix::fs::symlink(t, dst).map_err(|e| format!("{}: {e}", dst.display()))?;
    } else {
        fs::copy(src, dst)
            .map_err(|e| format!("copy {} to {}: {e}", src.display(), dst.display()))?;
    }
    finish(dst, meta, owner, chmod)
}

/// Owner (the `--chown` ids, else root), mode and modification time.
fn finish(
    dst: &Path,
    meta: &fs::Metadata,
    owner: Option<(u32, u32)>,
    chmod: Option<u32>,
) -> std::result::Result<(), String> {
    let (u, g) = owner.unwrap_or((0, 0));
    std::os::unix::fs::lchown(dst, Some(u), Some(g))
        .map_err(|e| format!("chown {}: {e}", dst.display()))?;
    if meta.file_type().is_symlink() {
        return Ok(());
    }
    let mode = chmod.unwrap_or(meta.mode() & 0o7777);
    fs::set_permissions(dst, fs::Permissions::from_mode(mode))
        .map_err(|e| format!("chmod {}: {e}", dst.display()))?;
    let mtime = std::time::UNIX_EPOCH + std::time::Duration::from_secs(meta.mtime().max(0) as u64);
    if let Ok(f) = fs::File::options()
        .write(!meta.is_dir())
        .read(meta.is_dir())
        .open(dst)
    {
        let _ = f.set_modified(mtime);
    }
    Ok(())
}

/// A local tar archive (plain or gzip) that ADD unpacks.
fn is_tar(p: &Path) -> bool {
    let mut head = [0u8; 512];
    let Ok(mut f) = fs::File::open(p) else {
        return false;
    };
    let n = f.read(&mut head).unwrap_or(0);
    (n >= 2 && head[..2] == [0x1f, 0x8b]) || (n >= 262 && &head[257..262] == b"ustar")
}

fn unpack_tar(src: &Path, dest: &Path) -> std::result::Result<(), String> {
    let mut f = fs::File::open(src).map_err(|e| format!("{}: {e}", src.display()))?;
    let mut magic = [0u8; 2];
    let gz = f
        .read(&mut magic)
        .is_ok_and(|n| n == 2 && magic == [0x1f, 0x8b]);
    let f = fs::File::open(src).map_err(|e| format!("{}: {e}", src.display()))?;
    let reader: Box<dyn Read> = if gz {
        Box::new(flate2::read::GzDecoder::new(f))
    } else {
        Box::new(f)
    };
    let mut a = tar::Archive::new(reader);
    a.set_preserve_permissions(true);
    a.set_preserve_ownerships(true);
    a.set_overwrite(true);
    a.unpack(dest)
        .map_err(|e| format!("unpack {}: {e}", src.display()))
}

/// The mode an `--chmod` value gives (octal).
pub fn parse_chmod(s: &str) -> Option<u32> {
    u32::from_str_radix(s, 8).ok().filter(|m| *m <= 0o7777)
}
