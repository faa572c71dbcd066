//! The user's options from where Pyxis users give them: srun's command
//! line, else the `PYXIS_CONTAINER_*` variables of the job's environment
//! (a site or a user sets defaults there). A flag and its negation both on
//! the command line is an error, as in Pyxis.

use crate::options::{self, Options, OPTIONS};

/// How an option was given on the command line: `None` not at all,
/// `Some(None)` a flag, `Some(Some(v))` with a value.
pub type Given = Option<Option<String>>;

/// Flags and their negations: one may be given, not both.
const PAIRS: &[(&str, &str)] = &[
    ("container-writable", "container-readonly"),
    ("container-mount-home", "no-container-mount-home"),
    ("container-remap-root", "no-container-remap-root"),
    ("container-entrypoint", "no-container-entrypoint"),
];

/// Pyxis's variables: (variable, option with a value, or a flag pair
/// `(on, off)` set by a boolean).
enum Var {
    Value(&'static str),
    Flag(&'static str, &'static str),
}

const VARIABLES: &[(&str, Var)] = &[
    ("PYXIS_CONTAINER_IMAGE", Var::Value("container-image")),
    ("PYXIS_CONTAINER_MOUNTS", Var::Value("container-mounts")),
    ("PYXIS_CONTAINER_WORKDIR", Var::Value("container-workdir")),
    ("PYXIS_CONTAINER_NAME", Var::Value("container-name")),
    ("PYXIS_CONTAINER_ENV", Var::Value("container-env")),
    ("PYXIS_CONTAINER_UNSHARE", Var::Value("container-unshare")),
    ("PYXIS_CONTAINER_SAVE", Var::Value("container-save")),
    (
        "PYXIS_CONTAINER_ENTRYPOINT_LOG",
        Var::Flag("container-entrypoint-log", "no-container-entrypoint-log"),
    ),
    (
        "PYXIS_CONTAINER_MOUNT_HOME",
        Var::Flag("container-mount-home", "no-container-mount-home"),
    ),
    (
        "PYXIS_CONTAINER_REMAP_ROOT",
        Var::Flag("container-remap-root", "no-container-remap-root"),
    ),
    (
        "PYXIS_CONTAINER_ENTRYPOINT",
        Var::Flag("container-entrypoint", "no-container-entrypoint"),
    ),
    (
        "PYXIS_CONTAINER_WRITABLE",
        Var::Flag("container-writable", "container-readonly"),
    ),
    (
        "PYXIS_CONTAINER_READONLY",
        Var::Flag("container-readonly", "container-writable"),
    ),
];

/// Whether `key` is one of [`site_default`]'s.
pub fn is_site_default(key: &str) -> bool {
    matches!(
        key,
        "writable" | "mount_home" | "remap_root" | "execute_entrypoint"
    )
}

/// The site's defaults from plugstack.conf arguments, as enroot's
/// configuration gives Pyxis its defaults: `writable=` (enroot's
/// `ENROOT_ROOTFS_WRITABLE`), `mount_home=` (`ENROOT_MOUNT_HOME`),
/// `remap_root=` (`ENROOT_REMAP_ROOT`), and Pyxis's own
/// `execute_entrypoint=` (`--container-entrypoint`), each `yes` or `no`.
/// `None` when `key` is none of them.
pub fn site_default(site: &mut Options, key: &str, value: &str) -> Option<Result<(), String>> {
    let slot = match key {
        "writable" => &mut site.writable,
        "mount_home" => &mut site.mount_home,
        "remap_root" => &mut site.remap_root,
        "execute_entrypoint" => &mut site.entrypoint,
        _ => return None,
    };
    Some(match boolean(value) {
        Some(b) => {
            *slot = b;
            Ok(())
        }
        None => Err(format!(
            "berth plugin: {key}={value} in plugstack.conf: use yes or no"
        )),
    })
}

/// Pyxis's booleans: `1 true yes y` and `0 false no n`; anything else is
/// not a boolean (the variable is then ignored).
fn boolean(v: &str) -> Option<bool> {
    match v.to_ascii_lowercase().as_str() {
        "1" | "true" | "yes" | "y" => Some(true),
        "0" | "false" | "no" | "n" => Some(false),
        _ => None,
    }
}

/// The options: `site` holds the site's defaults (plugstack.conf),
/// `given(name)` says how srun's command line gave each of [`OPTIONS`],
/// `env(name)` reads the job's environment. A variable applies only where
/// its option (or the option's negation) is not on the command line.
/// Errors say what is wrong.
pub fn gather(
    site: &Options,
    given: impl Fn(&str) -> Given,
    env: impl Fn(&str) -> Option<String>,
) -> Result<Options, String> {
    for (on, off) in PAIRS {
        if given(on).is_some() && given(off).is_some() {
            return Err(format!(
                "both --{on} and --{off} were given: use one of them"
            ));
        }
    }
    let mut o = site.clone();
    // Variables first, so that the command line overrides them.
    for (var, what) in VARIABLES {
        let Some(value) = env(var).filter(|v| !v.is_empty()) else {
            continue;
        };
        match what {
            Var::Value(name) if given(name).is_none() => {
                options::apply(&mut o, name, Some(&value)).map_err(|e| format!("{var}: {e}"))?
            }
            Var::Flag(on, off) if given(on).is_none() && given(off).is_none() => {
                if let Some(b) = boolean(&value) {
                    options::apply(&mut o, if b { on } else { off }, None)?;
                }
            }
            _ => {}
        }
    }
    for (name, _, _) in OPTIONS {
        if let Some(value) = given(name) {
            options::apply(&mut o, name, value.as_deref())?;
        }
    }
    Ok(o)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(cli: &[(&str, Option<&str>)], env: &[(&str, &str)]) -> Result<Options, String> {
        let given = |n: &str| {
            cli.iter()
                .find(|(k, _)| *k == n)
                .map(|(_, v)| v.map(str::to_string))
        };
        let env = |n: &str| {
            env.iter()
                .find(|(k, _)| *k == n)
                .map(|(_, v)| v.to_string())
        };
        gather(&Options::default(), given, env)
    }

    #[test]
    fn variables_apply_where_the_command_line_is_silent() {
        let o = run(
            &[],
            &[
                ("PYXIS_CONTAINER_IMAGE", "ubuntu:22.04"),
                ("PYXIS_CONTAINER_MOUNTS", "/home:/test-mnt"),
                ("PYXIS_CONTAINER_WORKDIR", "/usr/local/bin"),
                ("PYXIS_CONTAINER_REMAP_ROOT", "yes"),
                ("PYXIS_CONTAINER_MOUNT_HOME", "0"),
                ("PYXIS_CONTAINER_WRITABLE", "1"),
                ("PYXIS_CONTAINER_ENV", "CUDA_VERSION"),
                ("PYXIS_CONTAINER_ENTRYPOINT", "maybe"),
            ],
        )
        .unwrap();
        assert_eq!(o.image.as_deref(), Some("ubuntu:22.04"));
        assert_eq!(o.mounts, ["/home:/test-mnt"]);
        assert_eq!(o.workdir.as_deref(), Some("/usr/local/bin"));
        assert!(o.remap_root && !o.mount_home && o.writable && !o.entrypoint);
        assert_eq!(o.env, ["CUDA_VERSION"]);
        let o = run(&[], &[("PYXIS_CONTAINER_READONLY", "1")]).unwrap();
        assert!(!o.writable);
    }

    #[test]
    fn the_command_line_wins() {
        let o = run(
            &[
                ("container-image", Some("ubuntu:24.04")),
                ("container-mounts", Some("/tmp:/mnt-cli")),
                ("container-readonly", None),
                ("no-container-remap-root", None),
            ],
            &[
                ("PYXIS_CONTAINER_IMAGE", "ubuntu:22.04"),
                ("PYXIS_CONTAINER_MOUNTS", "/home:/mnt-env"),
                ("PYXIS_CONTAINER_WRITABLE", "1"),
                ("PYXIS_CONTAINER_REMAP_ROOT", "1"),
            ],
        )
        .unwrap();
        assert_eq!(o.image.as_deref(), Some("ubuntu:24.04"));
        assert_eq!(o.mounts, ["/tmp:/mnt-cli"]);
        assert!(!o.writable && !o.remap_root);
    }

    #[test]
    fn site_defaults_come_first() {
        let mut site = Options::default();
        assert_eq!(site_default(&mut site, "writable", "yes"), Some(Ok(())));
        assert_eq!(site_default(&mut site, "mount_home", "n"), Some(Ok(())));
        assert_eq!(
            site_default(&mut site, "execute_entrypoint", "1"),
            Some(Ok(()))
        );
        assert!(site_default(&mut site, "remap_root", "maybe").is_some_and(|r| r.is_err()));
        assert_eq!(site_default(&mut site, "berth", "/x"), None);
        let o = gather(&site, |_| None, |_| None).unwrap();
        assert!(o.writable && !o.mount_home && !o.remap_root && o.entrypoint);
        let o = gather(
            &site,
            |n| (n == "container-readonly").then_some(None),
            |n| (n == "PYXIS_CONTAINER_MOUNT_HOME").then(|| "1".to_string()),
        )
        .unwrap();
        assert!(!o.writable && o.mount_home);
    }

    #[test]
    fn a_flag_and_its_negation_are_an_error() {
        let err = run(
            &[("container-readonly", None), ("container-writable", None)],
            &[],
        )
        .unwrap_err();
        assert!(err.contains("both --container-writable and --container-readonly"));
        let err = run(&[], &[("PYXIS_CONTAINER_MOUNTS", "devpts:/x")]).unwrap_err();
        assert!(err.starts_with("PYXIS_CONTAINER_MOUNTS: "), "{err}");
    }
}
