//! What berth takes from the host: stores others can write (M6), a runtime
//! directory another user took (L1), the caller's descriptors (L3).

use std::fs;
use std::process::Command;

use super::{image_with, image_with_etc};
use crate::harness::Sandbox;
use crate::need_env;

/// M6: a store was trusted whoever could write it. A group-writable store
/// (a project store, say) is refused, a group-writable shared store is
/// skipped with a warning; an edited `meta.json` (Entrypoint, Env) no
/// longer changes what runs, since the run configuration comes from the
/// config whose digest is the id, and an edited config.json is refused.
#[test]
#[cfg_attr(
    not(berth_it_env),
    ignore = "needs the test fixtures: sudo bash tests/setup/setup.sh"
)]
fn a_store_others_can_write_or_an_edited_record_is_not_trusted() {
    let env = need_env!();
    let sb = Sandbox::new(env);
    let img = image_with(&sb, "m6", "true", "--config.env GREETING=from-config");
    let chmod = |mode: &str, p: &std::path::Path| {
        assert!(Command::new("chmod")
            .arg(mode)
            .arg(p)
            .status()
            .unwrap()
            .success());
    };
    // meta.json says otherwise: the config wins.
    let dir = sb.squashfs_of(&img).parent().unwrap().to_path_buf();
    let meta_path = dir.join("meta.json");
    let mut meta: serde_json::Value =
        serde_json::from_slice(&fs::read(&meta_path).unwrap()).unwrap();
    meta["run"]["env"] = serde_json::json!(["PATH=/bin", "GREETING=planted", "LD_PRELOAD=/x.so"]);
    chmod("u+w", &meta_path);
    fs::write(&meta_path, serde_json::to_vec(&meta).unwrap()).unwrap();
    chmod("0444", &meta_path);
    let out = sb.run(&["run", &img, "sh", "-c", "echo $GREETING $LD_PRELOAD"]);
    assert_eq!(out.code(), 0, "{}", out.stderr());
    assert_eq!(out.stdout().trim(), "from-config", "{}", out.stdout());
    // An edited config.json: refused.
    let config = dir.join("config.json");
    chmod("u+w", &config);
    let text = fs::read_to_string(&config)
        .unwrap()
        .replace("from-config", "planted");
    fs::write(&config, text).unwrap();
    let out = sb.run(&["run", &img, "true"]);
    assert_ne!(out.code(), 0);
    assert!(
        out.stderr().contains("the store was changed"),
        "{}",
        out.stderr()
    );
    // A group-writable store: refused, with the fix.
    chmod("g+w", &sb.store());
    let out = sb.run(&["run", &img, "true"]);
    assert_eq!(out.code(), 125, "{}", out.stderr());
    assert!(
        out.stderr().contains("writable by its group"),
        "{}",
        out.stderr()
    );
    chmod("g-w", &sb.store());
    // A group-writable shared store: skipped, with a warning.
    let site = Sandbox::new(env);
    let shared_img = image_with(&site, "m6-shared", "true", "");
    chmod("g+w", &site.store());
    fs::write(
        sb.dir.path().join("no-site-config.toml"),
        format!("shared_stores = [\"{}\"]\n", site.store().display()),
    )
    .unwrap();
    let out = sb.run(&["inspect", &shared_img]);
    assert!(
        out.stderr().contains("not using the shared store"),
        "{}",
        out.stderr()
    );
    assert_ne!(out.code(), 0, "{}", out.stdout());
}

/// L1: `/tmp/berth-UID` has a predictable name, and another user may take
/// it first. berth refuses it (it is not the caller's), and says why and
/// what to do; with `XDG_RUNTIME_DIR` the same run works.
#[test]
#[cfg_attr(
    not(berth_it_root),
    ignore = "needs root and the test fixtures: sudo bash tests/setup/setup.sh, then the tests as root"
)]
fn a_runtime_directory_taken_by_another_user_is_refused_with_the_way_out() {
    let env = need_env!();
    let sb = Sandbox::new(env);
    let img = image_with_etc(&sb, "l1", "true");
    let other = env.var("BERTH_IT_OTHER_USER").to_string();
    let (ouid, ogid) = (
        crate::harness::id_number(&["-u", &other])
            .expect("the second test user (setup.sh makes it)"),
        crate::harness::id_number(&["-g", &other]).unwrap(),
    );
    let (uid, _, _) = sb.env.test_user().clone();
    let tmpdir = sb.dir.path().join("l1-tmp");
    fs::create_dir_all(&tmpdir).unwrap();
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(&tmpdir, fs::Permissions::from_mode(0o1777)).unwrap();
    let taken = tmpdir.join(format!("berth-{uid}"));
    fs::create_dir(&taken).unwrap();
    std::os::unix::fs::chown(&taken, Some(ouid), Some(ogid)).unwrap();
    let out = sb
        .berth(&["run", &img, "sh", "-c", ":"])
        .env_remove("XDG_RUNTIME_DIR")
        .env("TMPDIR", &tmpdir)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "{err}");
    assert!(err.contains("belongs to another user"), "{err}");
    assert!(err.contains("XDG_RUNTIME_DIR"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    let private = sb.dir.path().join("l1-run");
    fs::create_dir_all(&private).unwrap();
    sb.chown_to_user(&private);
    fs::set_permissions(&private, fs::Permissions::from_mode(0o700)).unwrap();
    let out = sb
        .berth(&["run", &img, "sh", "-c", ":"])
        .env("XDG_RUNTIME_DIR", &private)
        .env("TMPDIR", &tmpdir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// L3: the PMI descriptor a launcher hands berth is named in `PMI_FD`; it
/// used to be taken from the container's environment, where the image's
/// `Env` can set it, so an image with `PMI_FD=7` kept a socket berth
/// inherited from its caller (a scheduler's connection) open across exec.
/// Now only berth's own environment names it.
#[test]
#[cfg_attr(
    not(berth_it_env),
    ignore = "needs the test fixtures: sudo bash tests/setup/setup.sh"
)]
fn an_images_env_cannot_keep_a_callers_socket_open() {
    let env = need_env!();
    let sb = Sandbox::new(env);
    let img = image_with(&sb, "pmifd", "true", "--config.env PMI_FD=7");
    let run = |pmi: Option<&str>| {
        let mut c = sb.command(
            std::path::Path::new("/usr/bin/python3"),
            &[
                "-c",
                "import os,socket,sys; a,b=socket.socketpair(); os.dup2(a.fileno(),7); \
                 os.set_inheritable(7,True); os.execv(sys.argv[1], sys.argv[1:])",
                env.berth.to_str().unwrap(),
                "run",
                &img,
                "sh",
                "-c",
                "[ -e /proc/self/fd/7 ] && echo FD7-OPEN; echo PMI_FD=$PMI_FD",
            ],
        );
        if let Some(v) = pmi {
            c.env("PMI_FD", v);
        }
        crate::harness::Out(c.output().unwrap())
    };
    let out = run(None);
    let all = format!("{}{}", out.stdout(), out.stderr());
    assert_eq!(out.code(), 0, "{all}");
    assert!(
        !all.contains("FD7-OPEN"),
        "the image kept the caller's socket: {all}"
    );
    // A launcher's own PMI_FD still reaches the rank.
    let out = run(Some("7"));
    let all = format!("{}{}", out.stdout(), out.stderr());
    assert!(
        all.contains("FD7-OPEN"),
        "the launcher's PMI socket was closed: {all}"
    );
}
