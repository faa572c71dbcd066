//! Named containers: `berth run --name NAME` keeps the container's changes
//! in the user's store for the next run of that name, `berth ps -a` lists
//! them, `berth commit` saves one as an image, `berth rm` removes one
//! (also with files a `--fakeroot` run gave to subordinate ids).

use std::time::{Duration, Instant};

use crate::harness::*;
use crate::need_env;

#[test]
#[cfg_attr(
    not(berth_it_env),
    ignore = "needs the test fixtures: sudo bash tests/setup/setup.sh"
)]
fn a_named_container_keeps_its_changes_until_it_is_removed() {
    let env = need_env!();
    let sb = Sandbox::new(env);
    let img = sb.layers();
    sb.sh(
        &img,
        &["--name", "dev"],
        "echo kept > /etc/marker; rm /layer2.txt",
    )
    .ok();
    let check = "cat /etc/marker; ls /layer2.txt 2>/dev/null || echo deleted";
    let out = sb.sh(&img, &["--name", "dev"], check).ok().stdout();
    assert_eq!(out, "kept\ndeleted\n");
    // Its directory in the store is hidden from it where a bind shows it:
    // its layer changes only through the overlay (a live commit reads it,
    // and a directory moved out of it could lead the read elsewhere).
    let store = sb.store();
    let store = store.to_str().unwrap();
    let bind = format!("{store}:{store}");
    let look = format!("ls -A {store}/containers/dev | wc -l; ls {store}/containers | grep -c dev");
    let out = sb
        .sh(&img, &["--name", "dev", "-v", &bind], &look)
        .ok()
        .stdout();
    assert_eq!(out, "0\n1\n");
    // Other runs do not see it; --rm with a name keeps nothing.
    let out = sb.sh(&img, &[], check).stdout();
    assert!(!out.contains("kept"), "{out}");
    sb.sh(&img, &["--rm", "--name", "gone", "--writable"], "touch /x")
        .ok();
    assert!(!sb.store().join("containers/gone").exists());
    // Listed, stopped.
    let out = sb.run(&["ps", "-a"]).ok().stdout();
    let line = out
        .lines()
        .find(|l| l.starts_with("dev "))
        .unwrap_or_default();
    assert!(line.contains("stopped") && line.contains(&img), "{out}");
    let j = sb.run(&["ps", "-a", "--format", "json"]).ok().json();
    assert_eq!(j["named"][0]["name"], "dev");
    assert_eq!(j["named"][0]["in_use"], false);
    // One run at a time: a second one, and rm, are refused while it runs.
    let mut holder = sb.spawn_berths(1, |_| {
        [
            "run",
            "--name",
            "dev",
            "--entrypoint",
            "",
            &img,
            "sh",
            "-c",
            "echo live > /etc/live && sleep 8",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    });
    let deadline = Instant::now() + Duration::from_secs(20);
    while !sb.run(&["ps", "-a"]).ok().stdout().contains("in use") {
        assert!(Instant::now() < deadline, "the holder never ran");
        std::thread::sleep(Duration::from_millis(100));
    }
    sb.sh(&img, &["--name", "dev"], "true")
        .fails(125, "in use by another container");
    sb.run(&["rm", "dev"]).fails(125, "in use by a run");
    // A running container is committed as its changes stand.
    let upper = sb.store().join("containers/dev/upper/etc/live");
    while std::fs::read_to_string(&upper).ok().as_deref() != Some("live\n") {
        assert!(Instant::now() < deadline, "the holder wrote nothing");
        std::thread::sleep(Duration::from_millis(100));
    }
    let out = sb.run(&["commit", "dev", "./live.sqsh"]).ok();
    assert!(out.stderr().contains("is running"), "{}", out.stderr());
    let out = sb
        .sh("./live.sqsh", &[], "cat /etc/live /etc/marker")
        .ok()
        .stdout();
    assert_eq!(out, "live\nkept\n");
    assert!(holder.remove(0).wait().unwrap().success());
    // Another image under the same name is refused, saying what to do.
    let debian = sb.debian();
    sb.sh(&debian, &["--name", "dev"], "true")
        .fails(125, "berth rm dev");
    // Saved as a file and as an image: each runs with the changes.
    sb.run(&["commit", "dev", "./dev.sqsh"]).ok();
    let out = sb.sh("./dev.sqsh", &[], "cat /etc/marker").ok().stdout();
    assert_eq!(out, "kept\n");
    // A named container of an image file run in place is committed from
    // that file (not in the store).
    sb.sh("./dev.sqsh", &["--name", "onfile"], "echo more > /etc/more")
        .ok();
    sb.run(&["commit", "onfile", "./onfile.sqsh"]).ok();
    let out = sb
        .sh("./onfile.sqsh", &[], "cat /etc/marker /etc/more")
        .ok()
        .stdout();
    assert_eq!(out, "kept\nmore\n");
    sb.run(&["rm", "onfile"]).ok();
    sb.run(&["commit", "dev", "devimg"]).ok();
    let out = sb.sh("devimg", &[], check).ok().stdout();
    assert_eq!(out, "kept\ndeleted\n");
    sb.run(&["rm", "dev"]).ok();
    assert!(!sb.store().join("containers/dev").exists());
    assert!(!sb.run(&["ps", "-a"]).ok().stdout().contains("dev "));
    sb.run(&["rm", "dev"]).fails(2, "no container dev");
}

#[test]
#[cfg_attr(
    not(berth_it_env),
    ignore = "needs the test fixtures: sudo bash tests/setup/setup.sh"
)]
fn rm_removes_what_a_fakeroot_run_gave_to_other_ids() {
    let env = need_env!();
    let sb = Sandbox::new(env);
    let img = sb.layers();
    // With a subordinate range these files belong to subordinate ids on
    // the host, which the user cannot remove directly.
    let script = "mkdir -p /srv/d && echo x > /srv/d/f && chown -R 1234:1234 /srv/d && chmod 700 /srv/d && ls -n /srv | grep -c 1234; true";
    let out = sb
        .sh(&img, &["--fakeroot", "--name", "fr"], script)
        .ok()
        .stdout();
    assert!(out == "1\n" || fallbacks(), "{out}");
    sb.run(&["rm", "fr"]).ok();
    assert!(!sb.store().join("containers/fr").exists());
}
