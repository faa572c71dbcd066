//! `berth run` and `berth shell`.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{anyhow, Result};
use berth_config::Config;
use berth_image::reference::ImageRef;
use berth_image::store::{Store, StoredImage};
use berth_runtime::rootfs::Bind;
use berth_runtime::semantics::{self, ImageDefaults, UserRequest};
use berth_runtime::{IdMode, RunSpec};

use super::Context;
use crate::cli::{ContainerArgs, RunArgs, ShellArgs};

/// `berth run`: exits with the command's status. Every failure of berth's
/// own is exit code 125 (as podman), whatever its class.
pub fn run(ctx: &Context, args: RunArgs) -> Result<ExitCode> {
    let started = Instant::now();
    let request = UserRequest {
        entrypoint: args.entrypoint.clone(),
        args: args.command.clone(),
        ..UserRequest::default()
    };
    let how = How {
        dry_run: args.dry_run,
        name: args.name.clone(),
        shared: args
            .shared
            .clone()
            .map(|k| (k, Duration::from_secs(args.linger))),
        argv0_fallback: args.argv0_fallback,
    };
    finish(start(
        ctx,
        &args.container,
        &args.image,
        request,
        started,
        how,
    ))
}

/// What `berth run` asks beyond the container options.
#[derive(Default, Clone)]
struct How {
    /// Print the plan, start nothing.
    dry_run: bool,
    /// The container's name (OCI state id).
    name: Option<String>,
    /// The shared container's key and linger time.
    shared: Option<(String, Duration)>,
    /// Look up a missing absolute command by its base name.
    argv0_fallback: bool,
}

/// `berth shell`: the image's bash if it has one, else sh.
pub fn shell(ctx: &Context, args: ShellArgs) -> Result<ExitCode> {
    let started = Instant::now();
    let request = UserRequest {
        entrypoint: Some("/bin/sh".to_string()),
        args: vec![
            "-c".to_string(),
            "if [ -x /bin/bash ]; then exec /bin/bash -l; else exec /bin/sh -l; fi".to_string(),
        ],
        ..UserRequest::default()
    };
    finish(start(
        ctx,
        &args.container,
        &args.image,
        request,
        started,
        How::default(),
    ))
}

fn finish(result: Result<i32>) -> Result<ExitCode> {
    match result {
        Ok(code) => Ok(ExitCode::from(code.clamp(0, 255) as u8)),
        Err(e) => {
            eprintln!("berth: error: {e:#}");
            Ok(ExitCode::from(berth_runtime::error::EXIT_BERTH as u8))
        }
    }
}

fn find_or_pull(
    config: &Config,
    store: &Store,
    image: &str,
    c: &ContainerArgs,
) -> Result<StoredImage> {
    match store.find(image) {
        Ok(img) => Ok(img),
        // A reference naming a registry is pulled first, as podman does.
        Err(berth_image::Error::ImageNotInStore(_)) if berth_image::reference::names_registry(image) => {
            let reference = ImageRef::parse(image)?;
            eprintln!("berth: {image} is not in the store; pulling it");
            let platform = berth_image::platform::Platform::host();
            super::pull::pull_into(config, store, &reference, &platform, c.tls.tls_verify, None, false)?;
            // The pull started threads; the run path forks and enters
            // namespaces, which wants a single-threaded process: start over.
            reexec()
        }
        Err(berth_image::Error::ImageNotInStore(_)) => Err(anyhow!(
            "image {image:?} is not in the store: pull it first (berth pull REF), or name its registry (e.g. docker.io/library/{image})"
        )),
        Err(e) => Err(e.into()),
    }
}

fn reexec() -> Result<StoredImage> {
    use std::os::unix::process::CommandExt;
    let exe = std::env::current_exe()?;
    let err = std::process::Command::new(exe)
        .args(std::env::args_os().skip(1))
        .exec();
    Err(anyhow!("cannot restart berth after the pull: {err}"))
}

fn parse_volume(spec: &str, cwd: &Path) -> Result<Bind> {
    let parts: Vec<&str> = spec.split(':').collect();
    let (src, dst, mode) = match parts.as_slice() {
        [s] => (*s, *s, None),
        [s, d] if *d == "ro" || *d == "rw" => (*s, *s, Some(*d)),
        [s, d] => (*s, *d, None),
        [s, d, m] => (*s, *d, Some(*m)),
        _ => return Err(anyhow!("bind {spec:?}: expected SRC[:DST[:ro|rw]]")),
    };
    let readonly = match mode {
        None | Some("rw") => false,
        Some("ro") => true,
        Some(other) => {
            return Err(anyhow!(
                "bind {spec:?}: unknown option {other:?} (use ro or rw)"
            ))
        }
    };
    if src.is_empty() || dst.is_empty() {
        return Err(anyhow!("bind {spec:?}: empty path"));
    }
    let source = if Path::new(src).is_absolute() {
        PathBuf::from(src)
    } else {
        cwd.join(src)
    };
    let source = source.canonicalize().map_err(|e| {
        anyhow!(
            "bind {spec:?}: source {} is not usable: {e}",
            source.display()
        )
    })?;
    let target = if dst.starts_with('/') {
        dst.to_string()
    } else if dst == src {
        source.to_string_lossy().into_owned()
    } else {
        return Err(anyhow!(
            "bind {spec:?}: the container path must be absolute"
        ));
    };
    if target.split('/').any(|c| c == "..") {
        return Err(anyhow!(
            "bind {spec:?}: the container path must not contain `..`"
        ));
    }
    Ok(Bind {
        source,
        target,
        readonly,
        spec: spec.to_string(),
        device: false,
    })
}

/// The binds of a run: `common` ones every default run of the user has
/// (site binds, home, /tmp: the keeper prepares them once), `extra` ones
/// of this run (the current directory unless already covered, `-v`), and
/// `all` of them in mount order (a later bind of a target wins; parents
/// before children).
struct RunBinds {
    common: Vec<Bind>,
    extra: Vec<Bind>,
    all: Vec<Bind>,
}

/// `--security-opt` values: `seccomp=default|unconfined|FILE` (the last
/// wins), for a command in `mode` (a profile's `includes` depend on it).
fn security_options(opts: &[String], mode: IdMode) -> Result<berth_runtime::seccomp::Seccomp> {
    let mut seccomp = berth_runtime::seccomp::Seccomp::Default;
    for opt in opts {
        match opt.split_once('=') {
            Some(("seccomp", v)) => seccomp = berth_runtime::seccomp::Seccomp::parse(v, mode)?,
            _ => {
                return Err(anyhow!(
                    "--security-opt {opt:?}: berth knows seccomp=default, seccomp=unconfined and seccomp=FILE (a Docker or OCI seccomp profile)"
                ))
            }
        }
    }
    Ok(seccomp)
}

/// Who the caller is in the container: real root, root with `--fakeroot`,
/// or themself.
fn id_mode(c: &ContainerArgs) -> IdMode {
    if rustix::process::getuid().is_root() {
        IdMode::HostRoot
    } else if c.fakeroot {
        IdMode::FakeRoot
    } else {
        IdMode::Identity
    }
}

fn in_mount_order(binds: Vec<Bind>) -> Vec<Bind> {
    let mut dedup: Vec<Bind> = Vec::new();
    for b in binds.into_iter().rev() {
        if !dedup.iter().any(|d| d.target == b.target) {
            dedup.push(b);
        }
    }
    dedup.reverse();
    dedup.sort_by_key(|b| b.target.matches('/').count());
    dedup
}

fn binds(
    config: &Config,
    c: &ContainerArgs,
    home: Option<&Path>,
    cwd: &Path,
    site_always: Vec<Bind>,
    injected: Vec<Bind>,
) -> Result<RunBinds> {
    let mut common: Vec<Bind> = Vec::new();
    for site in &config.runtime.binds {
        match parse_volume(site, Path::new("/")) {
            Ok(b) => common.push(b),
            // Site binds name paths that may not exist on every node.
            Err(e) => tracing::debug!("skipping site bind: {e:#}"),
        }
    }
    // Real root gets no host home, /tmp or working directory unless asked
    // (-v): a root container writing /root/.ssh or host /tmp owns the node.
    let host_root = rustix::process::getuid().is_root();
    if let Some(h) = home.filter(|h| h.is_dir() && !c.no_home && !host_root) {
        common.push(Bind {
            source: h.to_path_buf(),
            target: h.to_string_lossy().into_owned(),
            readonly: false,
            spec: "home".to_string(),
            device: false,
        });
    }
    if Path::new("/tmp").is_dir() && !host_root {
        common.push(Bind {
            source: PathBuf::from("/tmp"),
            target: "/tmp".to_string(),
            readonly: false,
            spec: "/tmp".to_string(),
            device: false,
        });
    }
    common.extend(site_always);
    let common = in_mount_order(common);
    let mut extra: Vec<Bind> = Vec::new();
    let covered = common.iter().any(|b| cwd.starts_with(&b.target));
    if cwd != Path::new("/") && !covered && !host_root {
        extra.push(Bind {
            source: cwd.to_path_buf(),
            target: cwd.to_string_lossy().into_owned(),
            readonly: false,
            spec: "current directory".to_string(),
            device: false,
        });
    }
    for v in &c.volumes {
        extra.push(parse_volume(v, cwd)?);
    }
    // Host resources last: a module's or a device's bind wins over a -v of
    // the same path.
    extra.extend(injected);
    let extra = in_mount_order(extra);
    let all = in_mount_order(common.iter().chain(extra.iter()).cloned().collect());
    Ok(RunBinds { common, extra, all })
}

/// A node-local copy of an image's record, by id. Records are content
/// addressed (an id's record never changes), so a run given a full id (as
/// the Slurm plugin passes) needs no metadata request to the store, which
/// may sit on a parallel filesystem: one node reads the store once, not
/// once per rank.
#[derive(serde::Serialize, serde::Deserialize)]
struct CachedImage {
    dir: PathBuf,
    record: berth_image::store::ImageRecord,
}

fn cache_path(id: &str) -> Option<PathBuf> {
    if !berth_image::store::is_full_id(id) {
        return None;
    }
    let hex = id.strip_prefix("sha256:")?;
    Some(
        berth_runtime::keeper::state_dir()
            .ok()?
            .join("images")
            .join(format!("{hex}.json")),
    )
}

/// The node-local record of `image`, if it came from one of the stores
/// that `config` names (another configuration's store is not this run's).
fn cached_by_id(image: &str, config: &Config) -> Option<StoredImage> {
    let path = cache_path(image)?;
    let cached: CachedImage =
        serde_json::from_str(&berth_runtime::state::read(&path).ok()?).ok()?;
    // The record is in berth's runtime directory: it must name an image
    // directory of a configured store, without `..`, and a plain file there.
    let plain = |p: &Path| {
        p.components().all(|c| {
            matches!(
                c,
                std::path::Component::RootDir | std::path::Component::Normal(_)
            )
        })
    };
    let ours = plain(&cached.dir)
        && cached.record.squashfs.file_is_plain()
        && std::iter::once(&config.store)
            .chain(config.shared_stores.iter())
            .any(|store| plain(store) && cached.dir.parent() == Some(&store.join("images")));
    (ours && cached.record.id == image).then(|| StoredImage {
        record: cached.record,
        dir: cached.dir,
        names: Vec::new(),
        shared: false,
    })
}

/// An exclusive lock on the node-local record of a full id (none for names).
fn cache_lock(image: &str) -> Option<std::fs::File> {
    let path = cache_path(image)?.with_extension("lock");
    std::fs::create_dir_all(path.parent()?).ok()?;
    let f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .ok()?;
    rustix::fs::flock(&f, rustix::fs::FlockOperation::LockExclusive).ok()?;
    Some(f)
}

/// Drops the node-local record of `image`; true if there was one.
fn forget(image: &str) -> bool {
    cache_path(image).is_some_and(|p| std::fs::remove_file(p).is_ok())
}

fn remember(img: &StoredImage) {
    // Called on a miss only (none, or another store's): replace it.
    let Some(path) = cache_path(&img.record.id) else {
        return;
    };
    let cached = CachedImage {
        dir: img.dir.clone(),
        record: img.record.clone(),
    };
    if let (Some(parent), Ok(bytes)) = (path.parent(), serde_json::to_vec(&cached)) {
        let _ = std::fs::create_dir_all(parent);
        let _ = berth_runtime::state::write(&path, &bytes);
    }
}

/// An injection plan's binds as the runtime's.
fn to_binds(plan: &berth_inject::Plan) -> Vec<Bind> {
    plan.binds()
        .into_iter()
        .map(|m| Bind {
            device: m.kind == berth_inject::plan::MountKind::Device,
            source: m.source,
            target: m.target,
            readonly: m.readonly,
            spec: m.origin,
        })
        .collect()
}

/// What the site's modules add to every run, and what `--gpus`,
/// `--device`, `--module`, `--mpi` and the OCI hooks that apply add to
/// this one. Warnings go to stderr.
fn inject(
    config: &Config,
    c: &ContainerArgs,
    command: &str,
    annotations: &[(String, String)],
) -> Result<(berth_inject::Plan, berth_inject::Plan)> {
    let site = super::modules::site(config)?;
    let request = berth_inject::Request {
        gpus: c
            .gpus
            .as_deref()
            .map(berth_inject::gpu::Selection::parse)
            .transpose()?,
        devices: c.devices.clone(),
        modules: c.modules.clone(),
        mpi: c.mpi,
        annotations: annotations.to_vec(),
        command: command.to_string(),
        has_bind_mounts: !c.volumes.is_empty(),
    };
    let always = site.always()?;
    let requested = site.requested(&request)?;
    for plan in [&always, &requested] {
        for w in &plan.warnings {
            eprintln!("berth: warning: {w}");
        }
    }
    Ok((always, requested))
}

fn host_env() -> Vec<(String, String)> {
    std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
        .collect()
}

/// Starts the container. A node-local record whose image file has gone
/// (removed from the store, or the store moved) is dropped and the store
/// asked again, once.
fn start(
    ctx: &Context,
    c: &ContainerArgs,
    image: &str,
    request: UserRequest,
    started: Instant,
    how: How,
) -> Result<i32> {
    // Bad options fail before anything is pulled or started.
    security_options(&c.security_opt, id_mode(c))?;
    let again = (request.clone(), how.clone());
    match start_once(ctx, c, image, request, started, how, true) {
        Err(e)
            if matches!(
                e.downcast_ref::<berth_runtime::Error>(),
                Some(berth_runtime::Error::ImageMissing(_))
            ) && forget(image) =>
        {
            start_once(ctx, c, image, again.0, started, again.1, false)
        }
        result => result,
    }
}

fn start_once(
    ctx: &Context,
    c: &ContainerArgs,
    image: &str,
    mut request: UserRequest,
    started: Instant,
    how: How,
    trust_cache: bool,
) -> Result<i32> {
    let How {
        dry_run,
        name: container_name,
        shared,
        argv0_fallback,
    } = how;
    if let Some((key, _)) = &shared {
        berth_runtime::shared::validate_key(key)?;
    }
    let config = ctx.config()?;
    let mut image_file = None;
    let mut startup_lock = None;
    let cached = if trust_cache {
        cached_by_id(image, &config)
    } else {
        None
    };
    let img = match cached {
        Some(img) => img,
        None => {
            // Ranks of a node starting at once: one reads the store and
            // starts the keeper, the others wait and use its copy.
            let lock = cache_lock(image);
            match cached_by_id(image, &config).filter(|_| trust_cache) {
                Some(img) => img,
                None => {
                    let found = berth_image::store::Store::open_id(
                        &config.store,
                        &config.shared_stores,
                        image,
                    );
                    let mut img = match found {
                        Some((img, file)) => {
                            image_file = Some(std::sync::Arc::new(file));
                            img
                        }
                        None => {
                            let store = ctx.store(&config)?;
                            find_or_pull(&config, &store, image, c)?
                        }
                    };
                    // Env, Entrypoint, Cmd from the config whose digest is
                    // the id, not from meta.json beside it (a store writer
                    // could edit that); the node's record keeps them.
                    img.record.run = img.verified_run_config()?;
                    remember(&img);
                    startup_lock =
                        lock.map(|l| std::sync::Arc::new(std::sync::Mutex::new(Some(l))));
                    img
                }
            }
        }
    };
    let uid = rustix::process::getuid().as_raw();
    let gid = rustix::process::getgid().as_raw();
    let mode = id_mode(c);
    let pw = berth_runtime::sys::getpwuid(uid);
    let name = pw
        .as_ref()
        .map(|p| p.name.clone())
        .unwrap_or_else(|| format!("u{uid}"));
    // $HOME as the caller has it, else the user database's.
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .filter(|h| h.is_absolute())
        .or_else(|| pw.as_ref().map(|p| PathBuf::from(&p.home)));
    let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/"));

    for f in &c.env_file {
        let text =
            std::fs::read_to_string(f).map_err(|e| anyhow!("--env-file {}: {e}", f.display()))?;
        request.env_files.extend(semantics::parse_env_file(&text)?);
    }
    request.env = c.env.clone();
    request.env_host = c.env_host;
    request.workdir = c.workdir.clone();

    let run = &img.record.run;
    let defaults = ImageDefaults {
        env: run.env.clone(),
        entrypoint: run.entrypoint.clone(),
        cmd: run.cmd.clone(),
        workdir: run.workdir.clone(),
    };
    let argv = semantics::command_line(&defaults, &request)?;
    let (inside_home, inside_user) = match mode {
        IdMode::FakeRoot | IdMode::HostRoot => ("/root".to_string(), "root".to_string()),
        IdMode::Identity => (
            home.as_ref()
                .map(|h| h.to_string_lossy().into_owned())
                .unwrap_or_else(|| "/".to_string()),
            name.clone(),
        ),
    };
    let hostname = rustix::system::uname()
        .nodename()
        .to_string_lossy()
        .into_owned();
    let fixed = vec![
        ("HOME".to_string(), inside_home.clone()),
        ("USER".to_string(), inside_user.clone()),
        ("LOGNAME".to_string(), inside_user),
        ("HOSTNAME".to_string(), hostname),
        ("container".to_string(), "berth".to_string()),
    ];
    let mut env = semantics::environment(&defaults, &request, &host_env(), &fixed)?;
    let workdir = semantics::workdir(&defaults, &request, cwd.to_str())?;
    // Host resources: what every run gets (site modules that apply
    // always: prepared once, with the user's other common binds) and what
    // this run asks for.
    let annotations = c
        .annotations
        .iter()
        .map(|a| {
            a.split_once('=')
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .ok_or_else(|| anyhow!("--annotation {a:?}: expected KEY=VALUE"))
        })
        .collect::<Result<Vec<_>>>()?;
    let (always, requested) = inject(&config, c, &argv[0], &annotations)?;
    always.apply_env(&mut env);
    requested.apply_env(&mut env);
    let run_binds = binds(
        &config,
        c,
        home.as_deref(),
        &cwd,
        to_binds(&always),
        to_binds(&requested),
    )?;
    // A run with its own device or library binds does not use the keeper's
    // prepared root: their mount points would stay behind in the shared
    // /dev and upper layer, where later runs would find them.
    // Nor does real root: each of its runs gets its own /proc and /tmp.
    let use_template = !c.no_home && requested.binds().is_empty() && mode != IdMode::HostRoot;
    let mut plan = always;
    plan.extend(requested);
    // The MPI bind model's ABI check runs inside the container, where the
    // image's libraries are.
    let preflight = plan.mpi.clone().map(|check| {
        berth_runtime::Preflight(std::sync::Arc::new(move || {
            berth_inject::mpi::check_image(&check, Path::new("/"))
        }))
    });
    if dry_run {
        let out = serde_json::json!({
            "image": {
                "id": img.record.id,
                "squashfs": img.squashfs_path(),
            },
            "argv": argv,
            "env": env.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>(),
            "workdir": workdir,
            "binds": run_binds.all,
            "writable": c.writable,
            "injected": plan,
        });
        println!("{}", serde_json::to_string_pretty(&out)?);
        return Ok(0);
    }
    let (passwd_line, group_line) = match mode {
        IdMode::Identity => {
            let gecos = pw.as_ref().map(|p| p.gecos.clone()).unwrap_or_default();
            let group = berth_runtime::sys::group_name(gid).unwrap_or_else(|| format!("g{gid}"));
            // A ':' or a newline would add fields or lines to the
            // container's /etc/passwd (another user, another home).
            for (what, value) in [
                ("home directory ($HOME)", &inside_home),
                ("GECOS field", &gecos),
                ("user name", &name),
                ("group name", &group),
            ] {
                if value.contains([':', '\n']) {
                    return Err(anyhow!(
                        "your {what} {value:?} holds ':' or a newline, which would corrupt the container's /etc/passwd; run with a HOME (and a user database entry) without them"
                    ));
                }
            }
            (
                Some(format!(
                    "{name}:x:{uid}:{gid}:{gecos}:{inside_home}:/bin/sh"
                )),
                Some(format!("{group}:x:{gid}:")),
            )
        }
        _ => (None, None),
    };
    let idle = std::env::var("BERTH_KEEPER_IDLE")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(config.runtime.keeper_idle_seconds);
    let timing =
        c.timing || std::env::var_os("BERTH_TIMING").is_some_and(|v| v != "0" && !v.is_empty());
    if mode == IdMode::HostRoot && shared.is_some() {
        return Err(anyhow!(
            "shared containers (--shared, Slurm's per-node containers) are not supported as real root: their tasks share the host's PID namespace, where a root container could signal any process; run as a user, or without --shared"
        ));
    }
    let seccomp = security_options(&c.security_opt, mode)?;
    let spec = RunSpec {
        seccomp,
        image: img.squashfs_path(),
        image_id: img.record.id.clone(),
        argv,
        env,
        workdir,
        binds: run_binds.all,
        writable: c.writable,
        // Real root always gets a PID namespace: its CAP_KILL then reaches
        // the container's processes only (so no --shared as root, below).
        pid_ns: c.pid || mode == IdMode::HostRoot,
        net_none: c.net == "none",
        mode,
        keeper_idle: Duration::from_secs(idle),
        berth_exe: std::env::current_exe()?,
        timing,
        started,
        template: use_template.then(|| berth_runtime::keeper::Template {
            binds: run_binds.common.clone(),
            passwd_line: passwd_line.clone(),
            group_line: group_line.clone(),
        }),
        extra_binds: run_binds.extra,
        image_file,
        startup_lock,
        passwd_line,
        group_line,
        uid,
        gid,
        preflight,
        hooks: plan
            .hooks
            .iter()
            .map(|h| berth_runtime::hooks::Hook {
                stage: h.stage.clone(),
                path: PathBuf::from(&h.path),
                args: h.args.clone(),
                env: h.env.clone(),
                timeout: h
                    .timeout
                    .filter(|t| *t > 0)
                    .map(|t| Duration::from_secs(t as u64)),
            })
            .collect(),
        annotations,
        id: container_name.unwrap_or_else(|| format!("berth-{}", std::process::id())),
        argv0_fallback,
    };
    match shared {
        Some((key, linger)) => Ok(berth_runtime::shared::run_shared(
            &spec, &key, image, linger,
        )?),
        None => Ok(berth_runtime::run(&spec)?),
    }
}
