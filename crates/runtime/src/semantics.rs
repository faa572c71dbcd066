//! Docker semantics: the command line, environment and working directory a
//! container starts with, from the image config and the user's overrides.
//! Pure functions: no system calls.
//!
//! Environment policy (podman's, with an HPC pass-through): the container
//! does not inherit the caller's environment, so host `PATH`,
//! `LD_LIBRARY_PATH` and the like cannot break the image. It starts from
//! defaults, then the image's `Env`, then host variables a scheduler, MPI or
//! GPU stack needs ([`PASSTHROUGH_PREFIXES`], [`PASSTHROUGH_NAMES`]), then
//! everything else from the host with `--env-host` (minus
//! [`NEVER_FROM_HOST`]), then `--env-file`, then `-e`.

/// Host variables passed through by prefix: schedulers, MPI launchers,
/// interconnects.
pub const PASSTHROUGH_PREFIXES: &[&str] = &[
    "SLURM_",
    "SLURMD_",
    "PMI_",
    "PMIX_",
    "OMPI_",
    "PRTE_",
    "HYDRA_",
    "MPIR_",
    "I_MPI_",
    "FI_",
    "UCX_",
    "NCCL_",
    "BERTH_CONTAINER_",
];

/// Host variables passed through by name.
pub const PASSTHROUGH_NAMES: &[&str] = &[
    "TERM",
    "TZ",
    "LANG",
    "CUDA_VISIBLE_DEVICES",
    "NVIDIA_VISIBLE_DEVICES",
    "ROCR_VISIBLE_DEVICES",
    "HIP_VISIBLE_DEVICES",
    "GPU_DEVICE_ORDINAL",
    "OMP_NUM_THREADS",
];

/// Host variables never taken from the host, even with `--env-host`: they
/// describe the host's file system and would break the image.
pub const NEVER_FROM_HOST: &[&str] = &[
    "PATH",
    "LD_LIBRARY_PATH",
    "LD_PRELOAD",
    "LD_AUDIT",
    "PYTHONPATH",
    "PYTHONHOME",
    "HOME",
    "PWD",
    "OLDPWD",
    "SHELL",
    "TMPDIR",
    "XDG_RUNTIME_DIR",
    "MANPATH",
    "MODULEPATH",
    "LOADEDMODULES",
];

/// Host variables not passed by [`UserRequest::env_below_image`] (the
/// Slurm plugin's Pyxis policy) unless `-e` names them: they describe the
/// host's file system or locale (a locale the image lacks makes perl and
/// python warn), or berth sets them itself.
pub const NOT_BELOW_IMAGE: &[&str] = &[
    "PATH",
    "LD_LIBRARY_PATH",
    "LD_PRELOAD",
    "LD_AUDIT",
    "HOME",
    "PWD",
    "OLDPWD",
    "LANG",
    "LANGUAGE",
    "LC_ALL",
];

/// The PATH used when the image sets none (podman's).
pub const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// Errors in the user's run options.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SemanticsError {
    /// Neither the user nor the image gives a command.
    #[error("no command to run: the image has no ENTRYPOINT or CMD; give a command after the image name")]
    NoCommand,
    /// A malformed `-e` or env-file line.
    #[error("invalid environment variable {0:?}: use NAME=VALUE or NAME")]
    BadEnv(String),
    /// A relative working directory.
    #[error("working directory {0:?} must be an absolute path")]
    RelativeWorkdir(String),
}

/// The image's run settings (from its OCI config).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ImageDefaults {
    /// `Env`.
    pub env: Vec<String>,
    /// `Entrypoint`.
    pub entrypoint: Vec<String>,
    /// `Cmd`.
    pub cmd: Vec<String>,
    /// `WorkingDir`.
    pub workdir: String,
}

/// What the user asked for.
#[derive(Debug, Clone, Default)]
pub struct UserRequest {
    /// `--entrypoint` (a single program, as in Docker; an empty string clears it).
    pub entrypoint: Option<String>,
    /// Arguments after the image name.
    pub args: Vec<String>,
    /// `--env-file` contents, in order, already read.
    pub env_files: Vec<String>,
    /// `-e` values, in order.
    pub env: Vec<String>,
    /// `--env-host`.
    pub env_host: bool,
    /// The whole host environment below the image's (Pyxis's policy, for
    /// the Slurm plugin): every host variable but [`NOT_BELOW_IMAGE`], then
    /// the image's `Env` over it, then the host's `TERM`.
    pub env_below_image: bool,
    /// `-w`.
    pub workdir: Option<String>,
}

/// The resolved command line: ENTRYPOINT + CMD, Docker's way.
pub fn command_line(
    image: &ImageDefaults,
    req: &UserRequest,
) -> Result<Vec<String>, SemanticsError> {
    let argv: Vec<String> = match &req.entrypoint {
        // Overriding the entrypoint drops the image's CMD.
        Some(ep) if ep.is_empty() => req.args.clone(),
        Some(ep) => std::iter::once(ep.clone())
            .chain(req.args.iter().cloned())
            .collect(),
        None => {
            let cmd = if req.args.is_empty() {
                &image.cmd
            } else {
                &req.args
            };
            image.entrypoint.iter().chain(cmd.iter()).cloned().collect()
        }
    };
    if argv.is_empty() {
        return Err(SemanticsError::NoCommand);
    }
    Ok(argv)
}

/// For `--entrypoint-first`: the command (the arguments, else the image's
/// CMD unless `--entrypoint` replaced the entrypoint, as Docker drops it
/// then) and, apart, the entrypoint to run before it (empty: none).
pub fn command_apart(
    image: &ImageDefaults,
    req: &UserRequest,
) -> Result<(Vec<String>, Vec<String>), SemanticsError> {
    let entrypoint = match &req.entrypoint {
        Some(ep) if ep.is_empty() => Vec::new(),
        Some(ep) => vec![ep.clone()],
        None => image.entrypoint.clone(),
    };
    let cmd = if req.args.is_empty() && req.entrypoint.is_none() {
        image.cmd.clone()
    } else {
        req.args.clone()
    };
    if cmd.is_empty() {
        return Err(SemanticsError::NoCommand);
    }
    Ok((cmd, entrypoint))
}

fn set(env: &mut Vec<(String, String)>, key: &str, value: &str) {
    match env.iter_mut().find(|(k, _)| k == key) {
        Some(slot) => slot.1 = value.to_string(),
        None => env.push((key.to_string(), value.to_string())),
    }
}

fn split_kv(item: &str) -> Option<(&str, &str)> {
    item.split_once('=')
}

/// Whether `name` can name an environment variable (not empty, no `=`,
/// no NUL).
pub fn valid_name(name: &str) -> bool {
    !name.is_empty() && !name.contains('\0') && !name.contains('=')
}

/// Whether the caller's variable `name` passes below the image's under
/// [`UserRequest::env_below_image`] (the Slurm plugin's policy).
pub fn passes_below_image(name: &str) -> bool {
    valid_name(name) && !NOT_BELOW_IMAGE.contains(&name)
}

/// Parses `--env-file` text: `NAME=VALUE` lines, `NAME` alone takes the
/// host's value, `#` comments and blank lines are skipped.
pub fn parse_env_file(text: &str) -> Result<Vec<String>, SemanticsError> {
    text.lines()
        .map(str::trim_start)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| {
            let name = l.split('=').next().unwrap_or_default();
            if valid_name(name.trim()) {
                Ok(l.trim_end_matches(['\r', '\n']).to_string())
            } else {
                Err(SemanticsError::BadEnv(l.to_string()))
            }
        })
        .collect()
}

/// The container's environment. `host` is the caller's environment and
/// `fixed` what berth sets itself (HOME, USER, HOSTNAME...), which only the
/// image's `Env`, env files and `-e` can override.
pub fn environment(
    image: &ImageDefaults,
    req: &UserRequest,
    host: &[(String, String)],
    fixed: &[(String, String)],
) -> Result<Vec<(String, String)>, SemanticsError> {
    let mut env: Vec<(String, String)> = vec![("PATH".to_string(), DEFAULT_PATH.to_string())];
    if req.env_below_image {
        for (k, v) in host {
            if passes_below_image(k) {
                set(&mut env, k, v);
            }
        }
    }
    for (k, v) in fixed {
        set(&mut env, k, v);
    }
    for item in &image.env {
        if let Some((k, v)) = split_kv(item) {
            set(&mut env, k, v);
        }
    }
    for (k, v) in host {
        let pass = if req.env_below_image {
            // The terminal is the caller's (enroot's environ.d does this).
            k == "TERM"
        } else {
            PASSTHROUGH_NAMES.contains(&k.as_str())
                || PASSTHROUGH_PREFIXES.iter().any(|p| k.starts_with(p))
                || (req.env_host && !NEVER_FROM_HOST.contains(&k.as_str()))
        };
        if pass && valid_name(k) {
            set(&mut env, k, v);
        }
    }
    let host_value = |k: &str| host.iter().find(|(hk, _)| hk == k).map(|(_, v)| v.clone());
    for item in req.env_files.iter().chain(req.env.iter()) {
        match split_kv(item) {
            Some((k, v)) if valid_name(k) => set(&mut env, k, v),
            Some(_) => return Err(SemanticsError::BadEnv(item.clone())),
            None if valid_name(item) => {
                // `-e NAME`: the host's value, if it has one (Docker).
                if let Some(v) = host_value(item) {
                    set(&mut env, item, &v);
                }
            }
            None => return Err(SemanticsError::BadEnv(item.clone())),
        }
    }
    Ok(env)
}

/// The working directory: `-w`, else the image's `WorkingDir`, else the
/// caller's current directory (HPC habit: it is bound into the container;
/// `cwd` is `None` where the run asks for `/` instead), else `/`.
pub fn workdir(
    image: &ImageDefaults,
    req: &UserRequest,
    cwd: Option<&str>,
) -> Result<String, SemanticsError> {
    if let Some(w) = &req.workdir {
        if !w.starts_with('/') {
            return Err(SemanticsError::RelativeWorkdir(w.clone()));
        }
        return Ok(w.clone());
    }
    if !image.workdir.is_empty() {
        // Docker resolves a relative WORKDIR against /.
        let w = if image.workdir.starts_with('/') {
            image.workdir.clone()
        } else {
            format!("/{}", image.workdir)
        };
        return Ok(w);
    }
    Ok(cwd
        .filter(|c| c.starts_with('/'))
        .unwrap_or("/")
        .to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn img(ep: &[&str], cmd: &[&str]) -> ImageDefaults {
        ImageDefaults {
            entrypoint: ep.iter().map(|s| s.to_string()).collect(),
            cmd: cmd.iter().map(|s| s.to_string()).collect(),
            ..Default::default()
        }
    }

    fn req(ep: Option<&str>, args: &[&str]) -> UserRequest {
        UserRequest {
            entrypoint: ep.map(str::to_string),
            args: args.iter().map(|s| s.to_string()).collect(),
            ..Default::default()
        }
    }

    #[test]
    fn entrypoint_and_cmd_like_docker() {
        let i = img(&["/bin/echo", "ep"], &["default"]);
        assert_eq!(
            command_line(&i, &req(None, &[])).unwrap(),
            ["/bin/echo", "ep", "default"]
        );
        assert_eq!(
            command_line(&i, &req(None, &["x", "y"])).unwrap(),
            ["/bin/echo", "ep", "x", "y"]
        );
        assert_eq!(
            command_line(&i, &req(Some("/bin/ls"), &[])).unwrap(),
            ["/bin/ls"]
        );
        assert_eq!(
            command_line(&i, &req(Some("/bin/ls"), &["-l"])).unwrap(),
            ["/bin/ls", "-l"]
        );
        assert_eq!(command_line(&i, &req(Some(""), &["sh"])).unwrap(), ["sh"]);
        // Apart (--entrypoint-first): the command, then the entrypoint.
        let apart = |ep, args: &[&str]| command_apart(&i, &req(ep, args)).unwrap();
        let strings = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            apart(None, &[]),
            (strings(&["default"]), strings(&["/bin/echo", "ep"]))
        );
        assert_eq!(apart(None, &["x"]).0, ["x"]);
        assert_eq!(
            apart(Some("/e"), &["x"]),
            (strings(&["x"]), strings(&["/e"]))
        );
        assert_eq!(apart(Some(""), &["x"]).1, Vec::<String>::new());
        assert!(command_apart(&i, &req(Some("/e"), &[])).is_err());
        assert_eq!(
            command_line(&img(&[], &[]), &req(None, &[])),
            Err(SemanticsError::NoCommand)
        );
        assert_eq!(
            command_line(&img(&[], &["sh"]), &req(None, &[])).unwrap(),
            ["sh"]
        );
    }

    #[test]
    fn environment_layers() {
        let image = ImageDefaults {
            env: vec![
                "PATH=/opt/bin:/bin".into(),
                "FOO=image".into(),
                "BAR=image".into(),
            ],
            ..Default::default()
        };
        let host: Vec<(String, String)> = [
            ("PATH", "/host/bin"),
            ("LD_LIBRARY_PATH", "/host/lib"),
            ("SLURM_JOB_ID", "42"),
            ("PMI_RANK", "3"),
            ("EDITOR", "vi"),
            ("SECRET", "s"),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let fixed = vec![("HOME".to_string(), "/home/u".to_string())];
        let mut r = UserRequest {
            env: vec!["BAR=cli".into(), "SECRET".into(), "UNSET_ON_HOST".into()],
            env_files: vec!["FOO=file".into()],
            ..Default::default()
        };
        let env = environment(&image, &r, &host, &fixed).unwrap();
        let get = |env: &[(String, String)], k: &str| {
            env.iter().find(|(x, _)| x == k).map(|(_, v)| v.clone())
        };
        assert_eq!(get(&env, "PATH").as_deref(), Some("/opt/bin:/bin"));
        assert_eq!(get(&env, "LD_LIBRARY_PATH"), None);
        assert_eq!(get(&env, "SLURM_JOB_ID").as_deref(), Some("42"));
        assert_eq!(get(&env, "PMI_RANK").as_deref(), Some("3"));
        assert_eq!(get(&env, "EDITOR"), None);
        assert_eq!(get(&env, "FOO").as_deref(), Some("file"));
        assert_eq!(get(&env, "BAR").as_deref(), Some("cli"));
        assert_eq!(get(&env, "SECRET").as_deref(), Some("s"));
        assert_eq!(get(&env, "UNSET_ON_HOST"), None);
        assert_eq!(get(&env, "HOME").as_deref(), Some("/home/u"));
        r.env_host = true;
        let env = environment(&image, &r, &host, &fixed).unwrap();
        assert_eq!(get(&env, "EDITOR").as_deref(), Some("vi"));
        assert_eq!(get(&env, "PATH").as_deref(), Some("/opt/bin:/bin"));
        assert_eq!(get(&env, "LD_LIBRARY_PATH"), None);
        r.env = vec!["=x".into()];
        assert!(environment(&image, &r, &host, &fixed).is_err());
    }

    #[test]
    fn below_the_image_as_pyxis_does() {
        let image = ImageDefaults {
            env: vec![
                "LD_LIBRARY_PATH=/usr/local/nvidia/lib".into(),
                "CUDA_VERSION=11.8.0".into(),
                "TERM=xterm".into(),
            ],
            ..Default::default()
        };
        let host: Vec<(String, String)> = [
            ("PATH", "/host/bin"),
            ("LD_LIBRARY_PATH", "/host/lib"),
            ("CUDA_VERSION", "12.0.0"),
            ("MASTER_ADDR", "n1"),
            ("LANG", "en_US.UTF-8"),
            ("TERM", "dumb"),
            ("HOME", "/tmp"),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let fixed = vec![("HOME".to_string(), "/home/u".to_string())];
        let mut r = UserRequest {
            env_below_image: true,
            ..Default::default()
        };
        let get = |env: &[(String, String)], k: &str| {
            env.iter().find(|(x, _)| x == k).map(|(_, v)| v.clone())
        };
        let env = environment(&image, &r, &host, &fixed).unwrap();
        assert_eq!(get(&env, "MASTER_ADDR").as_deref(), Some("n1"));
        assert_eq!(get(&env, "CUDA_VERSION").as_deref(), Some("11.8.0"));
        assert_eq!(
            get(&env, "LD_LIBRARY_PATH").as_deref(),
            Some("/usr/local/nvidia/lib")
        );
        assert_eq!(get(&env, "PATH").as_deref(), Some(DEFAULT_PATH));
        assert_eq!(get(&env, "LANG"), None);
        assert_eq!(get(&env, "TERM").as_deref(), Some("dumb"));
        assert_eq!(get(&env, "HOME").as_deref(), Some("/home/u"));
        // --container-env NAME: the host's value wins.
        r.env = vec!["CUDA_VERSION".into(), "LANG".into()];
        let env = environment(&image, &r, &host, &fixed).unwrap();
        assert_eq!(get(&env, "CUDA_VERSION").as_deref(), Some("12.0.0"));
        assert_eq!(get(&env, "LANG").as_deref(), Some("en_US.UTF-8"));
    }

    #[test]
    fn default_path_when_image_has_none() {
        let env =
            environment(&ImageDefaults::default(), &UserRequest::default(), &[], &[]).unwrap();
        assert_eq!(env, vec![("PATH".to_string(), DEFAULT_PATH.to_string())]);
    }

    #[test]
    fn env_files() {
        let parsed = parse_env_file("# comment\n\nA=1\nB\n  C=x=y\n").unwrap();
        assert_eq!(parsed, ["A=1", "B", "C=x=y"]);
        assert!(parse_env_file("=bad\n").is_err());
    }

    #[test]
    fn workdirs() {
        let mut i = ImageDefaults::default();
        let mut r = UserRequest::default();
        assert_eq!(
            workdir(&i, &r, Some("/home/u/proj")).unwrap(),
            "/home/u/proj"
        );
        assert_eq!(workdir(&i, &r, None).unwrap(), "/");
        i.workdir = "app".into();
        assert_eq!(workdir(&i, &r, Some("/x")).unwrap(), "/app");
        r.workdir = Some("/data".into());
        assert_eq!(workdir(&i, &r, Some("/x")).unwrap(), "/data");
        r.workdir = Some("rel".into());
        assert!(workdir(&i, &r, None).is_err());
    }
}
