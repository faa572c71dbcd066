//! A run's spec and the container's build sequence, through the
//! recording kernel.

use super::*;
use crate::node::Deciding;
use crate::sys::fake::{Call, Recording};
use std::os::fd::OwnedFd;

fn spec(template: bool, extra: &[&str]) -> RunSpec {
    let bind = |t: &str| Bind {
        source: "/x".into(),
        target: t.into(),
        readonly: false,
        spec: t.into(),
        device: false,
        options: Default::default(),
    };
    RunSpec {
        id: "c".into(),
        image: ImageSpec {
            id: "sha256:ab".into(),
            squashfs: "/s".into(),
            offset: 0,
            verity: None,
        },
        process: Process {
            argv: vec!["true".into()],
            env: vec![("A".into(), "1".into())],
            workdir: "/".into(),
            argv0_fallback: false,
            create_workdir: true,
            seccomp: Default::default(),
            root_emulation: Default::default(),
            entrypoint_first: None,
        },
        identity: Identity {
            mode: IdMode::Identity,
            uid: 1000,
            gid: 1000,
            passwd_line: None,
            group_line: None,
        },
        binds: vec![],
        template: template.then(|| Template {
            binds: vec![bind("/home/me"), bind("/tmp")],
            passwd_line: None,
            group_line: None,
        }),
        extra_binds: extra.iter().map(|t| bind(t)).collect(),
        writable: false,
        overlay: None,
        loader_cache: None,
        pid_ns: false,
        net_none: false,
        ipc_ns: false,
        uts_ns: false,
        hooks: vec![],
        annotations: vec![],
        preflight: None,
        keeper_idle: Duration::from_secs(30),
        squashfs_server: Default::default(),
        image_mount: Default::default(),
        root_overlay: Default::default(),
        berth_exe: "/b".into(),
        timing: None,
    }
}

#[test]
fn a_run_uses_the_prepared_root_unless_its_binds_cover_the_templates() {
    assert!(spec(true, &["/work"]).uses_template());
    assert!(spec(true, &["/home/me/project"]).uses_template());
    assert!(!spec(true, &["/home"]).uses_template());
    assert!(!spec(true, &["/"]).uses_template());
    assert!(!spec(false, &[]).uses_template());
    let mut writable = spec(true, &[]);
    writable.writable = true;
    assert!(!writable.uses_template());
}

#[test]
fn the_plan_shows_the_environment_as_strings() {
    let j = serde_json::to_value(spec(false, &[])).unwrap();
    assert_eq!(j["env"][0], "A=1");
    assert_eq!(j["argv"][0], "true");
    assert_eq!(j["image"]["squashfs"], "/s");
    assert_eq!(j["identity"]["mode"], "identity");
}

/// What a container's child changes, in order: the keeper's user
/// namespace, its mount namespace, a mount namespace of its own, the root
/// (every mount of it before `pivot_root`), then the nested user namespace
/// and `no_new_privs` last. Run in a forked child: `build` changes the
/// working directory.
#[test]
fn a_container_joins_the_keeper_builds_its_root_then_drops_privileges() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path().join("keepers/k");
    std::fs::create_dir_all(dir.join("mnt/image/etc")).unwrap();
    std::fs::write(
        dir.join("mnt/image/etc/passwd"),
        "root:x:0:0::/root:/bin/sh\n",
    )
    .unwrap();
    std::fs::create_dir_all(dir.join("mnt/stage")).unwrap();
    let ns = || -> OwnedFd { File::open("/dev/null").unwrap().into() };
    let share = Deciding::begin(&dir, "keeper.lock")
        .unwrap()
        .share()
        .unwrap();
    let lease = KeeperLease {
        dir: dir.clone(),
        pid: 1,
        userns: Some(ns()),
        mntns: ns(),
        template_mntns: None,
        nested_userns: Some(ns()),
        share,
    };
    let run = spec(false, &[]);
    let root = dir.join("mnt/stage/root");
    let (r, w) = rustix::pipe::pipe().unwrap();
    let pid = match sys::fork().unwrap() {
        Fork::Child => {
            drop(r);
            let k = Recording::new().with_root(&root);
            let built = build(&k, &run, &lease, &mut Timing::off(), None);
            let text: String = k.calls().iter().map(|c| format!("{c:?}\n")).collect();
            let _ = rustix::io::write(&w, text.as_bytes());
            sys::exit_now(if built.is_ok() { 0 } else { 1 })
        }
        Fork::Parent(pid) => pid,
    };
    drop(w);
    let mut text = String::new();
    std::io::Read::read_to_string(&mut File::from(r), &mut text).unwrap();
    let (_, exit) = sys::wait(pid, false).unwrap().unwrap();
    assert_eq!(exit.as_code(), 0, "{text}");
    let calls: Vec<&str> = text.lines().collect();
    let changes: Vec<String> = calls
        .iter()
        .filter(|c| {
            !c.starts_with("Mount") && !c.starts_with("OpenInRoot") && !c.starts_with("SetAttr")
        })
        .map(|c| c.to_string())
        .collect();
    assert_eq!(
        changes,
        vec![
            "Setns(User)".to_string(),
            "Setns(Mount)".to_string(),
            format!("{:?}", Call::Unshare(UnshareFlags::NEWNS)),
            format!("{:?}", Call::PivotRoot(root.clone())),
            "Setns(User)".to_string(),
            "NoNewPrivs".to_string(),
        ]
    );
    let pivot = calls
        .iter()
        .position(|c| c.starts_with("PivotRoot"))
        .unwrap();
    let unshare = calls.iter().position(|c| c.starts_with("Unshare")).unwrap();
    let mounts: Vec<usize> = (0..calls.len())
        .filter(|i| calls[*i].starts_with("Mount"))
        .collect();
    assert!(!mounts.is_empty());
    assert!(mounts.iter().all(|m| *m > unshare && *m < pivot), "{text}");
}
