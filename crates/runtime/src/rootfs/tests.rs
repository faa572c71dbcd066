//! The mount sequence of a root, checked with the recording kernel: the
//! paths are real (a temporary directory stands for the image and the
//! stage), the mounts are written down.

use std::path::{Path, PathBuf};

use super::*;
use crate::sys::fake::{Call, Recording};

/// An "image" with /etc/passwd, a symlink to the host's /etc and a
/// directory symlink, and an empty stage beside it.
struct Scene {
    dir: tempfile::TempDir,
    image: PathBuf,
    stage: PathBuf,
}

impl Scene {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let image = dir.path().join("image");
        std::fs::create_dir_all(image.join("etc")).unwrap();
        std::fs::create_dir_all(image.join("usr/share")).unwrap();
        std::fs::write(image.join("etc/passwd"), "root:x:0:0::/root:/bin/sh\n").unwrap();
        std::os::unix::fs::symlink("/etc", image.join("hostetc")).unwrap();
        // What the overlay would show at stage/root (the fake mounts
        // nothing; `base` finds the directory there).
        let root = dir.path().join("stage/root");
        std::fs::create_dir_all(root.join("etc")).unwrap();
        std::fs::write(root.join("etc/passwd"), "root:x:0:0::/root:/bin/sh\n").unwrap();
        std::os::unix::fs::symlink("/etc", root.join("hostetc")).unwrap();
        std::fs::create_dir_all(dir.path().join("data/sub")).unwrap();
        Scene {
            image,
            stage: dir.path().join("stage"),
            dir,
        }
    }

    fn stage(&self) -> PathBuf {
        self.stage.clone()
    }

    /// The stage's `root/`, where the overlay would be.
    fn root(&self) -> PathBuf {
        self.stage().join("root")
    }

    fn kernel(&self) -> Recording {
        Recording::new().with_root(&self.stage().join("root"))
    }

    fn data(&self) -> PathBuf {
        self.dir.path().join("data")
    }
}

fn bind(source: &Path, target: &str, readonly: bool, device: bool) -> Bind {
    Bind {
        source: source.to_path_buf(),
        target: target.to_string(),
        readonly,
        spec: target.to_string(),
        device,
        options: Default::default(),
    }
}

fn plan<'a>(s: &'a Scene, binds: &'a [Bind]) -> RootfsPlan<'a> {
    RootfsPlan {
        profile: Profile::Container,
        layers: Layers::Overlay {
            image: &s.image,
            stage: &s.stage,
            writable: false,
            persistent: None,
            user_xattr: false,
            apt_hint: false,
            loader_cache: None,
            overlay: Default::default(),
        },
        fresh_proc: false,
        binds,
        passwd_line: Some("me:x:1000:1000::/home/me:/bin/sh"),
        group_line: Some("me:x:1000:"),
        workdir: "/work",
        confined: false,
        hidden: &[],
        own_ipc: false,
    }
}

/// A mount's target, flags and fstype. Every target named by a descriptor
/// was still open when mounted on (`fd:N?` would be one closed before).
fn mounts(k: &Recording) -> Vec<(String, sys::MountFlags, Option<String>)> {
    let all = k.mounts();
    assert!(
        !all.iter()
            .any(|c| matches!(c, Call::Mount { target, .. } if target.ends_with('?'))),
        "a mount on a descriptor already closed: {all:?}"
    );
    all.into_iter()
        .filter_map(|c| match c {
            Call::Mount {
                target,
                flags,
                fstype,
                ..
            } => Some((target, flags, fstype)),
            _ => None,
        })
        .collect()
}

/// `prepare` on the scene with the recording kernel.
fn prepared<'a>(s: &'a Scene, binds: &'a [Bind], f: impl FnOnce(&mut RootfsPlan<'a>)) -> Recording {
    let k = s.kernel();
    let mut p = plan(s, binds);
    f(&mut p);
    let root = prepare(&k, &p).unwrap();
    assert_eq!(root, s.root());
    k
}

#[test]
fn every_target_inside_the_container_is_resolved_in_the_root() {
    let s = Scene::new();
    let binds = [
        bind(&s.data(), "/data", false, false),
        bind(Path::new("/dev/null"), "/dev/nvidia0", false, true),
        // Through the image's symlink to the host's /etc: stays inside.
        bind(&s.data(), "/hostetc/evil", true, false),
    ];
    let k = prepared(&s, &binds, |_| {});
    let root = s.root();
    for (target, _, fstype) in mounts(&k) {
        let base = target == "/" || Path::new(&target) == s.stage() || Path::new(&target) == root;
        assert!(
            base || target.starts_with("in-root:/"),
            "mount on {target} ({fstype:?}) is not resolved inside the root"
        );
    }
    // The symlink was followed inside the image: /etc/evil of the root,
    // never the host's /etc.
    assert!(root.join("etc/evil").is_dir());
    assert!(!Path::new("/etc/evil").exists());
}

#[test]
fn binds_get_nosuid_and_nodev_and_devices_keep_theirs() {
    let s = Scene::new();
    let binds = [
        bind(&s.data(), "/data", true, false),
        bind(Path::new("/dev/null"), "/dev/nvidia0", false, true),
    ];
    let k = prepared(&s, &binds, |_| {});
    let m = mounts(&k);
    let on = |t: &str| -> Vec<sys::MountFlags> {
        m.iter()
            .filter(|(x, _, _)| x == t)
            .map(|(_, f, _)| *f)
            .collect()
    };
    let data = on("in-root:/data");
    assert_eq!(data.len(), 2, "{m:?}");
    assert_eq!(data[0], libc::MS_BIND | libc::MS_REC);
    let remount = data[1];
    for f in [
        libc::MS_REMOUNT,
        libc::MS_BIND,
        libc::MS_NOSUID,
        libc::MS_NODEV,
        libc::MS_RDONLY,
    ] {
        assert_ne!(remount & f, 0, "flag {f:#x} missing on /data's remount");
    }
    // The device: one plain bind, no remount adding nodev.
    assert_eq!(on("in-root:/dev/nvidia0"), vec![libc::MS_BIND]);
    // Read-only binds are read-only all the way down.
    assert!(k.calls().contains(&Call::SetAttrRecursive {
        target: "in-root:/data".into(),
        set: sys::ATTR_NOSUID | sys::ATTR_NODEV | sys::ATTR_RDONLY,
    }));
    // /sys too.
    let sys_remount = on("in-root:/sys")[1];
    assert_ne!(sys_remount & libc::MS_RDONLY, 0);
}

#[test]
fn an_own_ipc_namespace_gets_its_own_mqueue() {
    let s = Scene::new();
    let k = prepared(&s, &[], |p| p.own_ipc = true);
    let m = mounts(&k);
    assert!(
        m.iter()
            .any(|(t, _, f)| t == "in-root:/dev/mqueue" && f.as_deref() == Some("mqueue")),
        "{m:?}"
    );
}

#[test]
fn tmpfs_noexec_and_propagation_as_asked() {
    let s = Scene::new();
    let mut scratch = bind(Path::new("tmpfs"), "/scratch", false, false);
    scratch.options = MountOptions {
        tmpfs: Some("size=1m".into()),
        noexec: true,
        propagation: Some(Propagation::Private),
        squashfs: None,
    };
    let mut data = bind(&s.data(), "/data", true, false);
    data.options.noexec = true;
    data.options.propagation = Some(Propagation::Runbindable);
    let k = prepared(&s, &[scratch, data], |_| {});
    let m = mounts(&k);
    let on = |t: &str| -> Vec<(sys::MountFlags, Option<String>)> {
        m.iter()
            .filter(|(x, _, _)| x == t)
            .map(|(_, f, fs)| (*f, fs.clone()))
            .collect()
    };
    assert_eq!(
        on("in-root:/scratch"),
        vec![
            (
                libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
                Some("tmpfs".to_string())
            ),
            (libc::MS_PRIVATE, None),
        ]
    );
    let data = on("in-root:/data");
    assert_eq!(data.len(), 4, "{data:?}");
    let noexec = data[2].0;
    assert_eq!(
        noexec & (libc::MS_REMOUNT | libc::MS_NOEXEC | libc::MS_RDONLY),
        libc::MS_REMOUNT | libc::MS_NOEXEC | libc::MS_RDONLY
    );
    assert_eq!(data[3].0, libc::MS_UNBINDABLE | libc::MS_REC);
}

#[test]
fn read_only_remounts_come_last() {
    let s = Scene::new();
    let binds = [bind(&s.data(), "/data", false, false)];
    let k = prepared(&s, &binds, |_| {});
    let m = mounts(&k);
    let root = s.root().display().to_string();
    let (last_target, last_flags, _) = m.last().unwrap().clone();
    assert_eq!(last_target, root);
    assert_eq!(
        last_flags & (libc::MS_REMOUNT | libc::MS_RDONLY),
        libc::MS_REMOUNT | libc::MS_RDONLY
    );
    // /dev's read-only remount follows every mount under /dev and the binds.
    let dev_ro = m
        .iter()
        .position(|(t, f, _)| t == "in-root:/dev" && *f == dev::DEV_READ_ONLY)
        .unwrap();
    let after: Vec<_> = m[dev_ro + 1..].iter().map(|(t, _, _)| t.as_str()).collect();
    assert_eq!(
        after,
        vec![root.as_str()],
        "mounts after /dev went read-only"
    );
    // Writable: no read-only remount of the root at all.
    let k = prepared(&s, &[], |p| {
        p.layers = Layers::Overlay {
            image: &s.image,
            stage: &s.stage,
            writable: true,
            persistent: None,
            user_xattr: false,
            apt_hint: false,
            loader_cache: None,
            overlay: Default::default(),
        }
    });
    assert!(!mounts(&k)
        .iter()
        .any(|(t, f, _)| *t == root && f & libc::MS_RDONLY != 0));
}

#[test]
fn identity_files_are_the_images_with_the_caller_added() {
    let s = Scene::new();
    let k = prepared(&s, &[], |_| {});
    let passwd = std::fs::read_to_string(s.stage().join("passwd")).unwrap();
    assert_eq!(
        passwd,
        "root:x:0:0::/root:/bin/sh\nme:x:1000:1000::/home/me:/bin/sh\n"
    );
    assert!(mounts(&k)
        .iter()
        .any(|(t, f, _)| t == "in-root:/etc/passwd" && *f == libc::MS_BIND));
}

#[test]
fn real_root_gets_masked_proc_and_a_private_tmp() {
    let s = Scene::new();
    // The fake mounts nothing on /proc: make the files runc's lists name.
    let root = s.root();
    std::fs::create_dir_all(root.join("proc/sys")).unwrap();
    std::fs::write(root.join("proc/kcore"), "").unwrap();
    let k = prepared(&s, &[], |p| p.confined = true);
    let m = mounts(&k);
    assert!(
        m.iter()
            .any(|(t, _, f)| t == "in-root:/proc/kcore" && f.is_none()),
        "{m:?}"
    );
    assert!(m
        .iter()
        .any(|(t, f, _)| t == "in-root:/proc/sys" && f & libc::MS_RDONLY != 0));
    assert!(m
        .iter()
        .any(|(t, _, f)| t == "in-root:/tmp" && f.as_deref() == Some("tmpfs")));
}

#[test]
fn the_runtime_directory_is_hidden_where_a_bind_shows_it() {
    let s = Scene::new();
    let hidden = s.data().join("sub").canonicalize().unwrap();
    let binds = [bind(&s.data(), "/data", false, false)];
    // The bind's target shows the source's tree: with the fake, the
    // mount point is empty, so make what the bind would show.
    std::fs::create_dir_all(s.root().join("data/sub")).unwrap();
    let hidden = [hidden.as_path()];
    let k = prepared(&s, &binds, |p| p.hidden = &hidden);
    assert!(mounts(&k).iter().any(|(t, f, fs)| t == "in-root:/data/sub"
        && f & libc::MS_RDONLY != 0
        && fs.as_deref() == Some("tmpfs")));
}

#[test]
fn a_build_step_gets_a_writable_root_its_own_shm_and_no_identity_files() {
    let s = Scene::new();
    let root = s.dir.path().join("stage0");
    std::fs::create_dir_all(root.join("etc")).unwrap();
    std::fs::write(root.join("etc/resolv.conf"), "").unwrap();
    let k = Recording::new().with_root(&root);
    let p = RootfsPlan {
        profile: Profile::BuildStep,
        layers: Layers::Directory(&root),
        fresh_proc: true,
        binds: &[],
        passwd_line: None,
        group_line: None,
        workdir: "/",
        confined: false,
        hidden: &[],
        own_ipc: false,
    };
    assemble(&k, &p).unwrap();
    let m = mounts(&k);
    assert!(m
        .iter()
        .any(|(t, _, f)| t == "in-root:/proc" && f.as_deref() == Some("proc")));
    assert!(m
        .iter()
        .any(|(t, _, f)| t == "in-root:/dev/shm" && f.as_deref() == Some("tmpfs")));
    assert!(!m.iter().any(|(t, _, _)| t == "in-root:/etc/passwd"));
    assert!(!m.iter().any(|(_, f, _)| *f == dev::DEV_READ_ONLY));
    assert!(!m.iter().any(|(_, f, _)| *f == ROOT_READ_ONLY));
    if Path::new("/etc/resolv.conf").is_file() {
        assert!(m.iter().any(|(t, _, _)| t == "in-root:/etc/resolv.conf"));
    }
    // /etc/hosts has no mount point in the stage: not bound.
    assert!(!m.iter().any(|(t, _, _)| t == "in-root:/etc/hosts"));
    assert_eq!(k.calls().last(), Some(&Call::PivotRoot(root.clone())));
}

#[test]
fn a_kernel_error_keeps_its_errno_and_names_the_path() {
    let s = Scene::new();
    let k = s.kernel();
    k.fail(
        "Mount { source: Some(\"berth\"), target: \"",
        sys::Errno::PERM,
    );
    let err = prepare(&k, &plan(&s, &[])).unwrap_err();
    assert_eq!(err.errno(), Some(sys::Errno::PERM));
    assert!(
        err.to_string().contains(&s.stage.display().to_string()),
        "{err}"
    );
}

#[test]
fn submounts_are_those_strictly_below_with_escapes_undone() {
    let info = "\
22 1 0:21 / / rw - ext4 /dev/sda rw
30 22 0:25 / /data rw - ext4 /dev/sdb rw
31 30 0:26 / /data/nfs rw - nfs srv:/x rw
32 30 0:27 / /data/with\\040space rw - tmpfs t rw
33 22 0:28 / /database rw - tmpfs t rw
";
    assert_eq!(
        submounts(info, Path::new("/data")),
        vec![
            PathBuf::from("/data/nfs"),
            PathBuf::from("/data/with space")
        ]
    );
    assert!(submounts(info, Path::new("/data/nfs")).is_empty());
}
