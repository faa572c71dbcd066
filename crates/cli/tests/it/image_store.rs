//! The store: listing, inspecting, removing, crash consistency, disk full.

use std::fs;
use std::process::Command;
use std::time::Duration;

use crate::harness::Sandbox;
use crate::need_env;

#[test]
#[cfg_attr(
    not(berth_it_env),
    ignore = "needs the test fixtures: sudo bash tests/setup/setup.sh"
)]
fn images_inspect_rmi_prune() {
    let env = need_env!();
    let sb = Sandbox::new(env);
    let id = sb.pull("layers").stdout().trim().to_string();
    let r = format!("{}/berth-test/layers:latest", env.anon());
    let table = sb.run(&["images"]).ok().stdout();
    assert!(
        table.contains(&format!("{}/berth-test/layers", env.anon())) && table.contains(&id[7..19]),
        "{table}"
    );
    let list = sb.run(&["images", "--format", "json"]).ok().json();
    assert_eq!(list[0]["id"], id.as_str());
    let j = sb.run(&["inspect", &r]).ok().json();
    assert_eq!(j["digest"], id.as_str());
    assert_eq!(j["config"]["config"]["Env"][1], "FOO=bar");
    assert_eq!(j["config"]["config"]["WorkingDir"], "/work");
    assert_eq!(j["run"]["entrypoint"][0], "/bin/echo");
    assert_eq!(j["layers"].as_array().unwrap().len(), 4);
    let path = j["squashfs"]["path"].as_str().unwrap();
    assert_eq!(
        fs::metadata(path).unwrap().len(),
        j["squashfs"]["size"].as_u64().unwrap()
    );
    assert_eq!(j["dropped_devices"][0], "special/chardev");
    // Short id prefixes work.
    sb.run(&["inspect", &id[7..19]]).ok();
    sb.run(&["check"]).ok();
    // A second name; removing one keeps the image.
    sb.run(&[
        "import",
        &format!("oci:{}:latest", env.fixtures().join("oci/layers").display()),
        "mine",
    ])
    .ok();
    let out = sb.run(&["rmi", &r]).ok();
    assert!(!out.stdout().contains("Deleted"), "{}", out.stdout());
    let out = sb.run(&["rmi", "mine"]).ok();
    assert!(
        out.stdout().contains(&format!("Deleted: {id}")),
        "{}",
        out.stdout()
    );
    assert!(sb.store_entries("images").is_empty());
    sb.run(&["inspect", "mine"]).fails(10, "not in the store");
    sb.run(&["rmi", "mine"]).fails(10, "not in the store");
    sb.run(&["prune"]).ok();
}

#[test]
#[cfg_attr(
    not(berth_it_env),
    ignore = "needs the test fixtures: sudo bash tests/setup/setup.sh"
)]
fn check_detects_a_corrupted_image_file() {
    let env = need_env!();
    let sb = Sandbox::new(env);
    sb.pull("layers");
    let path = sb.squashfs_of(&format!("{}/berth-test/layers", env.anon()));
    let mut bytes = fs::read(&path).unwrap();
    bytes[1000] ^= 1;
    // Root may write the read-only file; the test user could not.
    fs::write(&path, bytes).unwrap();
    let out = sb.run(&["check"]);
    assert_eq!(out.code(), 13);
    assert!(out.stdout().contains("CORRUPT"), "{}", out.stdout());
}

#[test]
#[cfg_attr(
    not(berth_it_env),
    ignore = "needs the test fixtures: sudo bash tests/setup/setup.sh"
)]
fn killed_pulls_leave_no_partial_image_and_the_next_pull_works() {
    let env = need_env!();
    let sb = Sandbox::new(env);
    let r = format!("{}/berth-test/hostfiles", env.anon());
    for delay_ms in [5u64, 20, 40, 80, 120] {
        let mut child = sb
            .berth(&["pull", "-q", "--tls-verify=false", &r])
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(delay_ms));
        let _ = child.kill();
        let _ = child.wait();
        // Whatever the moment, images/ holds complete images only.
        for e in sb.store_entries("images") {
            let dir = sb.store().join("images").join(&e);
            assert!(
                dir.join("meta.json").is_file() && dir.join("image.sqfs").is_file(),
                "partial image {e}"
            );
        }
        sb.run(&["rmi", &r]);
    }
    sb.run(&["pull", "-q", "--tls-verify=false", &r]).ok();
    sb.run(&["check"]).ok();
    sb.run(&["prune"]).ok();
    sb.assert_store_tmp_empty();
}

#[test]
#[cfg_attr(
    not(berth_it_root),
    ignore = "needs root and the test fixtures: sudo bash tests/setup/setup.sh, then the tests as root"
)]
fn full_disk_fails_cleanly() {
    let env = need_env!();
    // Root, to mount a small tmpfs.
    env.test_user();
    let sb = Sandbox::new(env);
    let small = sb.dir.path().join("small");
    fs::create_dir_all(&small).unwrap();
    let st = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=600k"])
        .arg("tmpfs")
        .arg(&small)
        .status()
        .unwrap();
    assert!(st.success());
    struct Umount(std::path::PathBuf);
    impl Drop for Umount {
        fn drop(&mut self) {
            let _ = Command::new("umount").arg(&self.0).status();
        }
    }
    let _guard = Umount(small.clone());
    sb.chown_to_user(&small);
    let r = format!("{}/berth-test/hostfiles", env.anon());
    let store = small.join("store");
    let store = store.to_str().unwrap();
    let out = sb.run(&["--store", store, "pull", "--tls-verify=false", &r]);
    assert_eq!(out.code(), 15, "{}", out.stderr());
    assert!(out.stderr().contains("full"), "{}", out.stderr());
    let entries = |sub: &str| {
        fs::read_dir(small.join("store").join(sub))
            .map(|d| d.count())
            .unwrap_or(0)
    };
    assert_eq!(entries("images"), 0);
    assert_eq!(entries("tmp"), 0);
    // The store stays usable: a small image still fits.
    sb.run(&[
        "--store",
        store,
        "pull",
        "-q",
        "--tls-verify=false",
        &format!("{}/berth-test/multiarch", env.anon()),
    ])
    .ok();
}

#[test]
#[cfg_attr(
    not(berth_it_env),
    ignore = "needs the test fixtures: sudo bash tests/setup/setup.sh"
)]
fn site_shared_store_is_searched_after_the_users() {
    let env = need_env!();
    // The site store: filled by an admin (here: a separate sandbox), made
    // world-readable, listed in the site config.
    let site = Sandbox::new(env);
    let site_store = site.store();
    std::fs::set_permissions(
        &site_store,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    site.run(&[
        "import",
        &format!("oci:{}:latest", env.fixtures().join("oci/layers").display()),
        "site/tools",
    ])
    .ok();
    let sb = Sandbox::new(env);
    let cfg = sb.dir.path().join("no-site-config.toml");
    fs::write(
        &cfg,
        format!("shared_stores = [\"{}\"]\n", site_store.display()),
    )
    .unwrap();
    let j = sb.run(&["inspect", "site/tools"]).ok().json();
    assert_eq!(j["shared_store"], true);
    // Readable by the user, and nothing is written to the shared store.
    assert!(fs::read(j["squashfs"]["path"].as_str().unwrap()).is_ok());
    sb.run(&["rmi", "site/tools"]).fails(15, "shared store");
    let table = sb.run(&["images"]).ok().stdout();
    assert!(table.contains("(shared)"), "{table}");

    // The same image under a name of the user's: named in the user's store,
    // kept in the site's (not copied), found by that name (before, the name
    // led nowhere and `berth run NAME` pulled again and again), and its
    // removal takes only the user's name.
    sb.run(&[
        "import",
        &format!("oci:{}:latest", env.fixtures().join("oci/layers").display()),
        "mine/tools",
    ])
    .ok();
    let mine = sb.run(&["inspect", "mine/tools"]).ok().json();
    assert_eq!(mine["shared_store"], true);
    assert_eq!(mine["id"], j["id"]);
    assert!(!sb
        .store()
        .join("images")
        .read_dir()
        .is_ok_and(|mut d| d.next().is_some()));
    let table = sb.run(&["images"]).ok().stdout();
    assert!(table.contains("mine/tools"), "{table}");
    sb.run(&["rmi", "site/tools"]).fails(15, "shared store");
    sb.run(&["rmi", "mine/tools"]).ok();
    sb.run(&["inspect", "mine/tools"]).fails(10, "");
    sb.run(&["inspect", "site/tools"]).ok();

    // A user's own copy of an image the shared store also names: the
    // shared store's name is refused and takes nothing of the user's (a
    // first version of the above removed the user's copy and names).
    let own = Sandbox::new(env);
    own.run(&[
        "import",
        &format!("oci:{}:latest", env.fixtures().join("oci/layers").display()),
        "own/tools",
    ])
    .ok();
    own.site_config(&format!("shared_stores = [\"{}\"]\n", site_store.display()));
    own.run(&["rmi", "site/tools"]).fails(15, "shared store");
    let kept = own.run(&["inspect", "own/tools"]).ok().json();
    assert_eq!(kept["shared_store"], false);
}
