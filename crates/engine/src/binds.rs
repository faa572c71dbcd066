//! A run's binds: `-v` specifications parsed, the defaults every run of
//! the user has (site binds, home, /tmp) and those of this run (the
//! current directory, `-v`, injected host resources), in mount order.

use std::path::{Path, PathBuf};

use berth_runtime::rootfs::{Bind, MountOptions, Propagation};

use crate::error::{Error, Result};

/// Parses a bind specification `SRC[:DST[:OPTIONS]]` (`SRC:ro` binds SRC
/// at the same path); a relative SRC is taken from `cwd`, and must exist.
/// OPTIONS, joined by `,` or `+` (Pyxis's form): `ro`, `rw`, `noexec`, a
/// propagation (`rprivate`, `unbindable`...), `sqsh` (SRC is a squashfs
/// or SIF file whose tree is mounted read-only at DST, CSCS's form), and
/// words that change nothing berth does anyway (`nosuid`, `nodev`,
/// `bind`, `rbind`, `x-create=dir|file|auto`).
pub fn parse_volume(spec: &str, cwd: &Path) -> Result<Bind> {
    let bad = |why: String| Error::Usage(format!("bind {spec:?}: {why}"));
    let parts: Vec<&str> = spec.split(':').collect();
    let (src, dst, opts) = match parts.as_slice() {
        [s] => (*s, *s, None),
        [s, d] if !d.starts_with('/') && parse_options(d).is_ok() => (*s, *s, Some(*d)),
        [s, d] => (*s, *d, None),
        [s, d, m] => (*s, *d, Some(*m)),
        _ => return Err(bad("expected SRC[:DST[:OPTIONS]]".into())),
    };
    let (readonly, options) = parse_options(opts.unwrap_or_default()).map_err(bad)?;
    if src.is_empty() || dst.is_empty() {
        return Err(bad("empty path".into()));
    }
    let source = if Path::new(src).is_absolute() {
        PathBuf::from(src)
    } else {
        cwd.join(src)
    };
    let source = source
        .canonicalize()
        .map_err(|e| bad(format!("source {} is not usable: {e}", source.display())))?;
    let target = if dst.starts_with('/') {
        dst.to_string()
    } else if dst == src {
        source.to_string_lossy().into_owned()
    } else {
        return Err(bad("the container path must be absolute".into()));
    };
    if target.split('/').any(|c| c == "..") {
        return Err(bad(
            "the container path must not contain `..` (it would leave the container's root)".into(),
        ));
    }
    let mut options = options;
    let mut readonly = readonly;
    if options.squashfs.is_some() {
        options.squashfs = Some(squashfs_offset(&source, dst == src, opts).map_err(bad)?);
        readonly = true;
    }
    Ok(Bind {
        source,
        target,
        readonly,
        spec: spec.to_string(),
        device: false,
        options,
    })
}

/// Where the squashfs of a `:sqsh` bind's `source` starts (a squashfs
/// file: 0; a SIF file: its primary partition), after checking that it is
/// one berth can mount, read-only, at a container path of its own.
fn squashfs_offset(
    source: &Path,
    same_path: bool,
    opts: Option<&str>,
) -> std::result::Result<u64, String> {
    if same_path {
        return Err("a squashfs data mount needs a container path: FILE:/DST:sqsh".into());
    }
    if opts.is_some_and(|o| o.split([',', '+']).any(|w| w == "rw")) {
        return Err("a squashfs data mount is read-only: leave out rw".into());
    }
    berth_image::image_file::ImageFile::open(source)
        .map(|f| f.offset)
        .map_err(|e| {
            format!("{e} (a squashfs data mount needs a squashfs file: mksquashfs DIR FILE)")
        })
}

/// A bind's OPTIONS: read-only, and the rest.
fn parse_options(text: &str) -> std::result::Result<(bool, MountOptions), String> {
    let mut readonly = false;
    let mut options = MountOptions::default();
    for word in text.split([',', '+']).filter(|w| !w.is_empty()) {
        match word {
            "ro" => readonly = true,
            "rw" => readonly = false,
            "noexec" => options.noexec = true,
            "exec" => options.noexec = false,
            // The offset is found once the source is known.
            "sqsh" => options.squashfs = Some(0),
            // Every bind is recursive, nosuid and nodev; missing mount
            // points are made to match the source.
            "nosuid" | "nodev" | "bind" | "rbind" | "x-create=auto" | "x-create=dir"
            | "x-create=file" => {}
            other => match Propagation::parse(other) {
                Some(p) => options.propagation = Some(p),
                None => {
                    return Err(format!(
                        "unknown option {other:?} (use ro, rw, noexec, sqsh, a propagation such as rprivate or unbindable, joined by , or +)"
                    ))
                }
            },
        }
    }
    Ok((readonly, options))
}

/// Parses `--tmpfs DST[:OPTIONS]`: a fresh tmpfs at DST; OPTIONS, joined
/// by `,` or `+`, are tmpfs's own (`size=1G`, `mode=1777`, `huge=...`)
/// and `ro`, `rw`, `noexec`, a propagation.
pub fn parse_tmpfs(spec: &str) -> Result<Bind> {
    let bad = |why: String| Error::Usage(format!("tmpfs {spec:?}: {why}"));
    let (dst, opts) = spec.split_once(':').unwrap_or((spec, ""));
    if !dst.starts_with('/') {
        return Err(bad("the container path must be absolute".into()));
    }
    if dst.split('/').any(|c| c == "..") {
        return Err(bad("the container path must not contain `..`".into()));
    }
    let mut data = Vec::new();
    let mut rest = Vec::new();
    for word in opts.split([',', '+']).filter(|w| !w.is_empty()) {
        let key = word.split('=').next().unwrap_or_default();
        if berth_runtime::rootfs::TMPFS_OPTIONS.contains(&key) && word.contains('=') {
            data.push(word);
        } else {
            rest.push(word);
        }
    }
    let (readonly, mut options) = parse_options(&rest.join(",")).map_err(|e| {
        bad(format!(
            "{e}, or tmpfs's {}",
            berth_runtime::rootfs::TMPFS_OPTIONS.join("=, ")
        ))
    })?;
    if options.squashfs.is_some() {
        return Err(bad("sqsh is for a squashfs file's bind, not a tmpfs".into()));
    }
    options.tmpfs = Some(data.join(","));
    Ok(Bind {
        source: PathBuf::from("tmpfs"),
        target: dst.to_string(),
        readonly,
        spec: format!("tmpfs:{spec}"),
        device: false,
        options,
    })
}

/// Binds in mount order: of two binds of one target the later wins, and
/// parents come before children.
pub fn in_mount_order(binds: Vec<Bind>) -> Vec<Bind> {
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

/// The binds of a run: `common` ones every default run of the user has
/// (site binds, home, /tmp, what site modules always add: a keeper
/// prepares them once), `extra` ones of this run (the current directory
/// unless already covered, `-v`, injected host resources), and `all` of
/// them in mount order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunBinds {
    /// The user's default binds, in mount order.
    pub common: Vec<Bind>,
    /// This run's own, in mount order.
    pub extra: Vec<Bind>,
    /// All of them, in mount order.
    pub all: Vec<Bind>,
}

/// What decides a run's binds.
#[derive(Debug, Clone)]
pub struct BindInputs<'a> {
    /// `[runtime] binds` of the configuration.
    pub site: &'a [String],
    /// The caller's home, bound unless `no_home` or real root.
    pub home: Option<&'a Path>,
    /// `--no-home`.
    pub no_home: bool,
    /// Real root gets no host home, /tmp or working directory unless asked.
    pub host_root: bool,
    /// The caller's working directory.
    pub cwd: &'a Path,
    /// `-v` specifications.
    pub volumes: &'a [String],
    /// `--tmpfs` specifications.
    pub tmpfs: &'a [String],
    /// `--umount` targets: binds to leave out.
    pub umount: &'a [String],
    /// What site modules add to every run.
    pub site_always: Vec<Bind>,
    /// What this run's host resources add (they win over a `-v` of the
    /// same path).
    pub injected: Vec<Bind>,
}

/// Works out a run's binds.
pub fn run_binds(inputs: BindInputs<'_>) -> Result<RunBinds> {
    let mut common: Vec<Bind> = Vec::new();
    for site in inputs.site {
        match parse_volume(site, Path::new("/")) {
            Ok(b) => common.push(b),
            // Site binds name paths that may not exist on every node.
            Err(e) => tracing::debug!("skipping site bind: {e}"),
        }
    }
    // Real root gets no host home, /tmp or working directory unless asked
    // (-v): a root container writing /root/.ssh or host /tmp owns the node.
    let plain = |source: &Path, spec: &str| Bind {
        source: source.to_path_buf(),
        target: source.to_string_lossy().into_owned(),
        readonly: false,
        spec: spec.to_string(),
        device: false,
        options: MountOptions::default(),
    };
    if let Some(h) = inputs
        .home
        .filter(|h| h.is_dir() && !inputs.no_home && !inputs.host_root)
    {
        common.push(plain(h, "home"));
    }
    if Path::new("/tmp").is_dir() && !inputs.host_root {
        common.push(plain(Path::new("/tmp"), "/tmp"));
    }
    common.extend(inputs.site_always);
    let common = in_mount_order(common);
    let mut extra: Vec<Bind> = Vec::new();
    let cwd = inputs.cwd;
    let covered = common.iter().any(|b| cwd.starts_with(&b.target));
    if cwd != Path::new("/") && !covered && !inputs.host_root {
        extra.push(plain(cwd, "current directory"));
    }
    for v in inputs.volumes {
        extra.push(parse_volume(v, cwd)?);
    }
    for t in inputs.tmpfs {
        extra.push(parse_tmpfs(t)?);
    }
    // Host resources last: a module's or a device's bind wins over a -v of
    // the same path.
    extra.extend(inputs.injected);
    let mut extra = in_mount_order(extra);
    let mut common = common;
    for target in inputs.umount {
        let t = target.trim_end_matches('/');
        let t = if t.is_empty() { "/" } else { t };
        let before = common.len() + extra.len();
        common.retain(|b| b.target != t);
        extra.retain(|b| b.target != t);
        if common.len() + extra.len() == before {
            return Err(Error::Usage(format!(
                "--umount {target}: berth mounts nothing there (it leaves out a bind: the home directory, /tmp, the current directory, a site's or a -v)"
            )));
        }
    }
    let all = in_mount_order(common.iter().chain(extra.iter()).cloned().collect());
    Ok(RunBinds { common, extra, all })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn targets(b: &[Bind]) -> Vec<&str> {
        b.iter().map(|b| b.target.as_str()).collect()
    }

    #[test]
    fn volume_specifications() {
        let d = tempfile::tempdir().unwrap();
        let real = d.path().canonicalize().unwrap();
        let b = parse_volume(&format!("{}:/data:ro", real.display()), Path::new("/")).unwrap();
        assert_eq!((b.target.as_str(), b.readonly), ("/data", true));
        let same = parse_volume(&format!("{}:ro", real.display()), Path::new("/")).unwrap();
        assert_eq!(same.target, real.to_string_lossy());
        // Relative to the working directory.
        std::fs::create_dir(real.join("sub")).unwrap();
        let rel = parse_volume("sub:/s", &real).unwrap();
        assert_eq!(rel.source, real.join("sub"));
        for (bad, why) in [
            ("/nonexistent-x:/x", "not usable"),
            ("/tmp:rel", "must be absolute"),
            ("/tmp:/a/../b", "`..`"),
            ("/tmp:/x:rx", "unknown option"),
            ("/tmp:/x:ro+suid", "unknown option \"suid\""),
            ("/tmp:/x:ro:y", "expected SRC"),
            (":/x", "empty path"),
        ] {
            let err = parse_volume(bad, Path::new("/")).unwrap_err().to_string();
            assert!(err.contains(why), "{bad}: {err}");
        }
    }

    #[test]
    fn squashfs_data_mounts_need_a_squashfs_file_and_a_container_path() {
        let d = tempfile::tempdir().unwrap();
        let text = d.path().join("notes.txt");
        std::fs::write(&text, "not squashfs").unwrap();
        let t = text.display();
        for (bad, why) in [
            (
                format!("{}:/x:sqsh", d.path().display()),
                "not a regular file",
            ),
            (format!("{t}:/x:sqsh"), "neither a SIF nor a squashfs"),
            (format!("{t}:sqsh"), "needs a container path"),
            (format!("{t}:/x:sqsh+rw"), "read-only"),
            (format!("{t}:/x:ro,sqsh"), "mksquashfs DIR FILE"),
        ] {
            let err = parse_volume(&bad, Path::new("/")).unwrap_err().to_string();
            assert!(err.contains(why), "{bad}: {err}");
        }
        let err = parse_tmpfs("/t:sqsh").unwrap_err().to_string();
        assert!(err.contains("not a tmpfs"), "{err}");
    }

    #[test]
    fn options_and_tmpfs() {
        let b = parse_volume("/tmp:/x:unbindable+ro,noexec,x-create=dir", Path::new("/")).unwrap();
        assert!(b.readonly && b.options.noexec);
        assert_eq!(b.options.propagation, Some(Propagation::Unbindable));
        let same = parse_volume("/tmp:rprivate", Path::new("/")).unwrap();
        assert_eq!(
            (same.target.as_str(), same.options.propagation),
            ("/tmp", Some(Propagation::Rprivate))
        );
        let t = parse_tmpfs("/scratch:size=1G+huge=within_size,noexec").unwrap();
        assert_eq!(t.target, "/scratch");
        assert_eq!(t.options.tmpfs.as_deref(), Some("size=1G,huge=within_size"));
        assert!(t.options.noexec && !t.readonly);
        assert_eq!(
            parse_tmpfs("/t").unwrap().options.tmpfs.as_deref(),
            Some("")
        );
        for (bad, why) in [
            ("rel", "must be absolute"),
            ("/a/../b", "`..`"),
            ("/t:exec=1", "unknown option"),
            ("/t:size", "unknown option"),
        ] {
            let err = parse_tmpfs(bad).unwrap_err().to_string();
            assert!(err.contains(why), "{bad}: {err}");
        }
    }

    #[test]
    fn later_binds_of_a_target_win_and_parents_come_first() {
        let b = |t: &str, spec: &str| Bind {
            source: "/s".into(),
            target: t.into(),
            readonly: false,
            spec: spec.into(),
            device: false,
            options: MountOptions::default(),
        };
        let out = in_mount_order(vec![b("/a/b", "1"), b("/a", "2"), b("/a/b", "3")]);
        assert_eq!(targets(&out), vec!["/a", "/a/b"]);
        assert_eq!(out[1].spec, "3");
    }

    #[test]
    fn defaults_and_this_runs_own() {
        // Not under /tmp, which every run binds (and so covers).
        let home = tempfile::tempdir_in("/var/tmp").unwrap();
        let h = home.path().canonicalize().unwrap();
        let work = h.join("project");
        std::fs::create_dir(&work).unwrap();
        let inputs = |host_root: bool, no_home: bool| BindInputs {
            site: &[],
            home: Some(&h),
            no_home,
            host_root,
            cwd: &work,
            volumes: &[],
            tmpfs: &[],
            umount: &[],
            site_always: vec![],
            injected: vec![],
        };
        let user = run_binds(inputs(false, false)).unwrap();
        assert!(targets(&user.common).contains(&h.to_str().unwrap()));
        // The working directory is under home: covered, not bound again.
        assert!(user.extra.is_empty(), "{:?}", user.extra);
        let no_home = run_binds(inputs(false, true)).unwrap();
        assert_eq!(targets(&no_home.extra), vec![work.to_str().unwrap()]);
        // Real root: no home, /tmp or working directory.
        let root = run_binds(inputs(true, false)).unwrap();
        assert!(root.all.is_empty(), "{:?}", root.all);
        // --umount leaves a bind out, and names what it could leave out.
        let gone = [h.to_string_lossy().into_owned()];
        let out = run_binds(BindInputs {
            umount: &gone,
            ..inputs(false, false)
        })
        .unwrap();
        assert!(
            !targets(&out.all).contains(&h.to_str().unwrap()),
            "{:?}",
            out.all
        );
        let nothing = ["/nowhere".to_string()];
        let err = run_binds(BindInputs {
            umount: &nothing,
            ..inputs(false, false)
        })
        .unwrap_err();
        assert!(err.to_string().contains("mounts nothing there"), "{err}");
    }
}
