//! `--container-mounts` entries in Pyxis's grammar, as berth's `-v` and
//! `--tmpfs` options: `SRC[:DST[:FLAGS]]`, where SRC is a path (absolute,
//! or relative to the job's directory: `./data`), `tmpfs` or `umount`; a
//! lone SRC is bound at the same path; FLAGS are joined by `+`.

/// One entry, as berth takes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mount {
    /// `-v SPEC`.
    Bind(String),
    /// `--tmpfs DST[:OPTIONS]`.
    Tmpfs(String),
    /// `--umount DST`: a bind berth would make there is left out.
    Umount(String),
}

/// The flags a bind takes (berth's `-v` OPTIONS); `x-create=` and the
/// words berth does anyway are accepted.
const BIND_FLAGS: &[&str] = &[
    "ro",
    "rw",
    "noexec",
    "exec",
    "nosuid",
    "nodev",
    "bind",
    "rbind",
    "private",
    "rprivate",
    "slave",
    "rslave",
    "shared",
    "rshared",
    "unbindable",
    "runbindable",
    "x-create=auto",
    "x-create=dir",
    "x-create=file",
    // A squashfs file's tree, read-only (CSCS's form; berth's -v takes it).
    "sqsh",
];

/// tmpfs's own options berth passes on (as `key=value`): the list of
/// `berth_runtime::rootfs::TMPFS_OPTIONS`, kept here so that the plugin
/// (loaded into srun and slurmstepd) does not link berth's runtime, and a
/// bad entry stops the step in srun rather than in every task.
const TMPFS_KEYS: &[&str] = &[
    "size",
    "nr_blocks",
    "nr_inodes",
    "mode",
    "uid",
    "gid",
    "huge",
    "mpol",
];

/// Parses one `--container-mounts` entry; the error says what is wrong
/// and what is allowed.
pub fn parse(entry: &str) -> Result<Mount, String> {
    let why = |w: String| format!("--container-mounts entry {entry:?}: {w}");
    let parts: Vec<&str> = entry.split(':').collect();
    let (src, dst, flags) = match parts.as_slice() {
        [s] => (*s, None, None),
        [s, d] => (*s, Some(*d), None),
        [s, d, f] => (*s, Some(*d), Some(*f)),
        _ => return Err(why("expected SRC[:DST[:FLAGS]]".into())),
    };
    let dst = dst.map(|d| target(d).map_err(&why)).transpose()?;
    let flags: Vec<&str> = flags.map(|f| f.split('+').collect()).unwrap_or_default();
    if flags.iter().any(|f| f.is_empty()) {
        return Err(why("an empty flag (flags are joined by +)".into()));
    }
    match src {
        "tmpfs" => {
            let dst = dst.ok_or_else(|| why("tmpfs needs a container path: tmpfs:/DST".into()))?;
            for f in &flags {
                let key = f.split('=').next().unwrap_or_default();
                let ok = (TMPFS_KEYS.contains(&key) && f.contains('='))
                    || matches!(*f, "ro" | "rw" | "noexec" | "exec" | "nosuid" | "nodev")
                    || f.starts_with("x-create=");
                if !ok {
                    return Err(why(format!(
                        "tmpfs flag {f:?} is not supported (use {}=..., ro, noexec)",
                        TMPFS_KEYS.join("=..., ")
                    )));
                }
            }
            let kept: Vec<&str> = flags
                .iter()
                .copied()
                .filter(|f| !f.starts_with("x-create="))
                .collect();
            Ok(Mount::Tmpfs(if kept.is_empty() {
                dst
            } else {
                format!("{dst}:{}", kept.join(","))
            }))
        }
        "umount" => {
            let dst =
                dst.ok_or_else(|| why("umount needs a container path: umount:/DST".into()))?;
            if !flags.is_empty() {
                return Err(why("umount takes no flags".into()));
            }
            Ok(Mount::Umount(dst))
        }
        s if s.starts_with('/') || s.starts_with('.') => {
            if let Some(bad) = flags.iter().find(|f| !BIND_FLAGS.contains(f)) {
                return Err(why(format!(
                    "flag {bad:?} is not supported (use {}, joined by +)",
                    BIND_FLAGS.join(", ")
                )));
            }
            let dst = match dst {
                Some(d) => d,
                None if s.starts_with('/') => s.to_string(),
                // A lone relative path: bound where it is on the host.
                None => return Ok(Mount::Bind(s.to_string())),
            };
            Ok(Mount::Bind(if flags.is_empty() {
                format!("{s}:{dst}")
            } else {
                format!("{s}:{dst}:{}", flags.join("+"))
            }))
        }
        "" => Err(why("the source is empty".into())),
        other => Err(why(format!(
            "source {other:?}: use a path (starting with / or .), tmpfs or umount"
        ))),
    }
}

/// A container path: absolute, or `./x` for `/x`; `..` is refused (it
/// would leave the container's root).
fn target(dst: &str) -> Result<String, String> {
    let abs = if dst.starts_with('/') {
        dst.to_string()
    } else if dst == "." {
        "/".to_string()
    } else if let Some(rest) = dst.strip_prefix("./") {
        format!("/{rest}")
    } else if dst.starts_with("..") {
        format!("/{dst}")
    } else if dst.is_empty() {
        return Err("the container path is empty".into());
    } else {
        return Err(format!(
            "container path {dst:?} must start with / (or ./ for a path from the container's root)"
        ));
    };
    if abs.split('/').any(|c| c == "..") {
        return Err(format!(
            "container path {dst:?} leaves the container's root with `..` (Cross-device link, \
             as enroot says): give a path inside the container"
        ));
    }
    Ok(abs)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bind(e: &str) -> String {
        match parse(e) {
            Ok(Mount::Bind(s)) => s,
            other => panic!("{e}: {other:?}"),
        }
    }

    #[test]
    fn pyxis_forms_become_berth_binds() {
        assert_eq!(bind("/home:/test-mnt"), "/home:/test-mnt");
        assert_eq!(bind("/var/lib"), "/var/lib:/var/lib");
        assert_eq!(bind("./"), "./");
        assert_eq!(bind("./:/test-mnt"), "./:/test-mnt");
        assert_eq!(bind("./x.py:/opt/x.py:ro"), "./x.py:/opt/x.py:ro");
        assert_eq!(bind("/tmp:/mnt:unbindable+ro"), "/tmp:/mnt:unbindable+ro");
        assert_eq!(bind("/d:./in"), "/d:/in");
        // CSCS's squashfs data mount, taken by berth's -v.
        assert_eq!(bind("./ds.sqsh:/ds:sqsh"), "./ds.sqsh:/ds:sqsh");
        assert_eq!(
            bind("/d:/e:x-create=dir+rprivate"),
            "/d:/e:x-create=dir+rprivate"
        );
        assert_eq!(
            parse("tmpfs:/mytmpfs:huge=within_size+size=1G").unwrap(),
            Mount::Tmpfs("/mytmpfs:huge=within_size,size=1G".into())
        );
        assert_eq!(parse("tmpfs:/t").unwrap(), Mount::Tmpfs("/t".into()));
        assert_eq!(
            parse("umount:/root").unwrap(),
            Mount::Umount("/root".into())
        );
    }

    #[test]
    fn bad_entries_say_why() {
        for (e, says) in [
            ("/home:../home", "Cross-device link"),
            ("/tmp:mnt:ro", "must start with /"),
            ("devpts:/d:ro", "use a path"),
            ("/a:/b:rbind+suid", "\"suid\" is not supported"),
            ("/a:/b:ro+", "empty flag"),
            ("tmpfs", "needs a container path"),
            ("tmpfs:/t:exec=1", "not supported"),
            ("umount", "needs a container path"),
            ("umount:/root:ro", "takes no flags"),
            ("/a:/b:c:d", "expected SRC"),
            (":/x", "empty"),
            ("/tmp:", "empty"),
        ] {
            let err = parse(e).unwrap_err();
            assert!(err.contains(says), "{e}: {err}");
        }
    }
}
