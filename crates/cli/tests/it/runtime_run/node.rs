//! Many runs on one node: concurrent runs share one mount, and runs by id
//! start from the node's record of the image.

use std::fs;
use std::time::Duration;

use crate::harness::{outputs, Sandbox};
use crate::need_env;

/// The stored image's full id.
fn id_of(sb: &Sandbox, image: &str) -> String {
    sb.run(&["inspect", image]).ok().json()["id"]
        .as_str()
        .unwrap()
        .to_string()
}

#[test]
#[cfg_attr(
    not(berth_it_env),
    ignore = "needs the test fixtures: sudo bash tests/setup/setup.sh"
)]
fn concurrent_runs_share_one_mount_and_it_goes_away() {
    let env = need_env!();
    let sb = Sandbox::new(env);
    let d = sb.debian();
    let runs = sb.spawn_berths(32, |i| {
        vec![
            "run".into(),
            d.clone(),
            "python3".into(),
            "-c".into(),
            format!("print({i})"),
        ]
    });
    let mut seen: Vec<u32> = outputs(runs)
        .into_iter()
        .map(|o| o.ok().stdout().trim().parse().unwrap())
        .collect();
    seen.sort();
    assert_eq!(seen, (0..32).collect::<Vec<_>>());
    let keepers = fs::read_dir(sb.dir.path().join("run/berth/keepers"))
        .unwrap()
        .count();
    assert_eq!(keepers, 1, "one keeper per image");
    // Idle keepers leave (BERTH_KEEPER_IDLE=1): no process of this sandbox remains.
    let marker = sb.dir.path().to_string_lossy().into_owned();
    let alive = || -> Vec<String> {
        fs::read_dir("/proc")
            .unwrap()
            .flatten()
            .filter_map(|p| fs::read(p.path().join("cmdline")).ok())
            .map(|c| String::from_utf8_lossy(&c).replace('\0', " "))
            .filter(|c| c.contains(&marker))
            .collect()
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !alive().is_empty() && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(alive().is_empty(), "still running: {:?}", alive());
}

#[test]
#[cfg_attr(
    not(berth_it_env),
    ignore = "needs the test fixtures: sudo bash tests/setup/setup.sh"
)]
fn runs_by_id_need_no_store_after_the_first() {
    let env = need_env!();
    let sb = Sandbox::new(env);
    let l = sb.layers();
    let id = id_of(&sb, &l);
    let out = sb
        .run(&["run", "--entrypoint", "", &id, "/bin/echo", "one"])
        .ok();
    assert_eq!(out.stdout(), "one\n");
    // The node keeps the record: with the store gone (as if its parallel
    // filesystem hiccupped), runs by id still start; by name they cannot.
    let store = sb.store();
    let hidden = sb.dir.path().join("store-away");
    fs::rename(&store, &hidden).unwrap();
    let out = sb
        .run(&["run", "--entrypoint", "", &id, "/bin/echo", "two"])
        .ok();
    assert_eq!(out.stdout(), "two\n");
    sb.run(&["run", "--entrypoint", "", &l, "/bin/true"])
        .fails(125, "not in the store");
}

#[test]
#[cfg_attr(
    not(berth_it_env),
    ignore = "needs the test fixtures: sudo bash tests/setup/setup.sh"
)]
fn a_node_record_of_another_store_or_of_a_removed_image_is_not_used() {
    let env = need_env!();
    let sb = Sandbox::new(env);
    let l = sb.layers();
    let id = id_of(&sb, &l);
    let run_id = |store: &str, word: &str| {
        sb.run(&[
            "--store",
            store,
            "run",
            "--entrypoint",
            "",
            &id,
            "/bin/echo",
            word,
        ])
    };
    let first = sb.store().to_string_lossy().to_string();
    assert_eq!(run_id(&first, "one").ok().stdout(), "one\n");
    // The same image in a second store (another configuration on the
    // node); the first store goes away. The node's record names the
    // first: a run with the second store does not follow it.
    let second = sb.dir.path().join("second-store");
    fs::create_dir(&second).unwrap();
    sb.chown_to_user(&second);
    let second = second.to_string_lossy().to_string();
    sb.run(&["--store", &second, "pull", "-q", "--tls-verify=false", &l])
        .ok();
    sb.wait_keepers_gone();
    fs::rename(sb.store(), sb.dir.path().join("store-away")).unwrap();
    assert_eq!(run_id(&second, "two").ok().stdout(), "two\n");
    // Removed from its store since the record was written: the run says
    // the image is not there, not that a file is missing.
    sb.wait_keepers_gone();
    sb.run(&["--store", &second, "rmi", &id]).ok();
    let out = run_id(&second, "three");
    assert_eq!(out.code(), 125, "{}", out.stderr());
    assert!(!out.stderr().contains("No such file"), "{}", out.stderr());
}
