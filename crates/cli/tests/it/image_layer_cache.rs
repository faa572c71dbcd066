//! The layer cache and parallel downloads (issue 19): pulls through the
//! FAULT-INJECTING proxy in `slow` mode (a fake named so: every blob GET
//! waits a moment, and its log line says how many were in flight) in front
//! of the real test registry, so the log tells which blobs each pull
//! fetched and how many at once.

use std::collections::BTreeSet;
use std::fs;
use std::path::PathBuf;

use crate::harness::Sandbox;
use crate::harness_proxy::{store, Proxy};
use crate::need_env;

const CACHE: &str = "layers/sha256";

/// The digests of the blobs the proxy saw fetched, in order.
fn fetched(proxy: &Proxy) -> Vec<String> {
    proxy
        .lines()
        .iter()
        .filter_map(|l| l.split("/blobs/").nth(1))
        .map(|rest| rest.split_whitespace().next().unwrap_or("").to_string())
        .collect()
}

/// How many blob GETs the proxy logged, once the count has not changed
/// for `quiet`.
fn settled(proxy: &Proxy, quiet: std::time::Duration) -> usize {
    let mut seen = fetched(proxy).len();
    let mut since = std::time::Instant::now();
    while since.elapsed() < quiet {
        std::thread::sleep(std::time::Duration::from_millis(100));
        let now = fetched(proxy).len();
        if now != seen {
            (seen, since) = (now, std::time::Instant::now());
        }
    }
    seen
}

/// The most blob GETs the proxy saw in flight at once.
fn most_at_once(proxy: &Proxy) -> usize {
    proxy
        .lines()
        .iter()
        .filter_map(|l| {
            l.rsplit_once("active=")
                .map(|(_, n)| n.parse().unwrap_or(0))
        })
        .max()
        .unwrap_or(0)
}

/// The layer digests `berth inspect` lists for `image`.
fn layers_of(sb: &Sandbox, store: &str, image: &str) -> BTreeSet<String> {
    let out = sb.run(&["--store", store, "inspect", image]).ok();
    out.json()["layers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["digest"].as_str().unwrap().to_string())
        .collect()
}

/// The digests in `store`'s layer cache.
fn cached(store: &str) -> BTreeSet<String> {
    match fs::read_dir(PathBuf::from(store).join(CACHE)) {
        Ok(rd) => rd
            .flatten()
            .map(|e| format!("sha256:{}", e.file_name().to_string_lossy()))
            .collect(),
        Err(_) => BTreeSet::new(),
    }
}

fn config(sb: &Sandbox, text: &str) {
    let conf = sb.home().join(".config/berth");
    fs::create_dir_all(&conf).unwrap();
    fs::write(
        conf.join("berth.toml"),
        format!("[network]\nattempts = 4\nbackoff_ms = 50\nread_timeout_seconds = 10\n{text}"),
    )
    .unwrap();
    sb.chown_to_user(&sb.home());
}

fn tmp_is_empty(store: &str) {
    let left: Vec<_> = fs::read_dir(PathBuf::from(store).join("tmp"))
        .map(|rd| rd.flatten().map(|e| e.file_name()).collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "leftovers in the store's tmp: {left:?}");
}

#[test]
#[cfg_attr(
    not(berth_it_env),
    ignore = "needs the test fixtures: sudo bash tests/setup/setup.sh"
)]
fn layers_are_downloaded_at_once_and_shared_through_the_cache() {
    let env = need_env!();
    let sb = Sandbox::new(env);
    config(&sb, "max_connections = 8\n");
    let proxy = Proxy::start_stalling(&sb, "slow", 0, 0.5);
    let s = store(&sb, "main");
    let pull = |image: &str| {
        sb.run(&[
            "--store",
            &s,
            "pull",
            "--tls-verify=false",
            &proxy.image(image),
        ])
        .ok()
    };

    // `layers` has four layers: fetched together, each into the cache.
    pull("layers");
    let layers = layers_of(&sb, &s, &proxy.image("layers"));
    assert_eq!(layers.len(), 4);
    assert_eq!(cached(&s), layers, "the cache holds the image's layers");
    let first: BTreeSet<String> = fetched(&proxy).into_iter().collect();
    assert!(layers.is_subset(&first), "{:?}", proxy.lines());
    assert!(
        most_at_once(&proxy) >= 2,
        "layers were fetched one after another: {:?}",
        proxy.lines()
    );
    tmp_is_empty(&s);

    // `docker-v2s2` shares its two layers with `layers`: only its config
    // is fetched, and the image is whole.
    let before = fetched(&proxy).len();
    let out = pull("docker-v2s2");
    let v2 = layers_of(&sb, &s, &proxy.image("docker-v2s2"));
    assert!(
        v2.is_subset(&layers),
        "the fixtures' docker-v2s2 should share its layers with layers: {v2:?} {layers:?}"
    );
    let second = &fetched(&proxy)[before..];
    assert!(
        second.iter().all(|d| !v2.contains(d)),
        "a cached layer was downloaded again: {second:?}"
    );
    assert!(
        out.stderr()
            .contains("2 of 2 layers were in the layer cache"),
        "{}",
        out.stderr()
    );
    sb.run(&["--store", &s, "check"]).ok();
    let run = sb
        .run(&[
            "--store",
            &s,
            "run",
            &proxy.image("docker-v2s2"),
            "sh",
            "-c",
            "echo $FOO; test ! -e /etc/motd && echo whiteout-applied",
        ])
        .ok();
    assert_eq!(run.stdout(), "bar\nwhiteout-applied\n");

    // A cached layer that went bad is found out as it is read, removed
    // from the cache and downloaded again; the image is right.
    sb.run(&["--store", &s, "rmi", &proxy.image("layers")]).ok();
    let victim = v2.iter().next().unwrap().clone();
    let path = PathBuf::from(&s)
        .join(CACHE)
        .join(victim.trim_start_matches("sha256:"));
    let mut bytes = fs::read(&path).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0xff;
    fs::write(&path, &bytes).unwrap();
    let before = fetched(&proxy).len();
    let out = pull("layers");
    assert!(out.stderr().contains("corrupt"), "{}", out.stderr());
    assert!(
        fetched(&proxy)[before..].contains(&victim),
        "the corrupt layer was not downloaded again: {:?}",
        proxy.lines()
    );
    sb.run(&["--store", &s, "check"]).ok();
    assert_eq!(cached(&s), layers);
    tmp_is_empty(&s);

    // Prune keeps what a stored image lists: removing `layers` leaves
    // docker-v2s2's two layers.
    sb.run(&["--store", &s, "rmi", &proxy.image("layers")]).ok();
    let out = sb.run(&["--store", &s, "prune"]).ok();
    assert!(
        out.stdout().contains("Deleted: 2 cached layers"),
        "{}",
        out.stdout()
    );
    assert_eq!(cached(&s), v2);
}

#[test]
#[cfg_attr(
    not(berth_it_env),
    ignore = "needs the test fixtures: sudo bash tests/setup/setup.sh"
)]
fn two_pulls_at_once_download_a_shared_layer_once() {
    let env = need_env!();
    let sb = Sandbox::new(env);
    config(&sb, "max_connections = 8\n");
    // Each blob GET waits a second: the two pulls overlap.
    let proxy = Proxy::start_stalling(&sb, "slow", 0, 1.0);
    let s = store(&sb, "both");
    let pulls = sb.spawn_berths(2, |i| {
        let image = proxy.image(["layers", "docker-v2s2"][i]);
        ["--store", &s, "pull", "--tls-verify=false", &image]
            .iter()
            .map(|a| a.to_string())
            .collect()
    });
    for out in crate::harness::outputs(pulls) {
        out.ok();
    }
    let v2 = layers_of(&sb, &s, &proxy.image("docker-v2s2"));
    assert!(v2.is_subset(&layers_of(&sb, &s, &proxy.image("layers"))));
    let got = fetched(&proxy);
    for layer in &v2 {
        let n = got.iter().filter(|d| *d == layer).count();
        assert_eq!(n, 1, "{layer} fetched {n} times: {:?}", proxy.lines());
    }
    sb.run(&["--store", &s, "check"]).ok();
    tmp_is_empty(&s);
}

#[test]
#[cfg_attr(
    not(berth_it_env),
    ignore = "needs the test fixtures: sudo bash tests/setup/setup.sh"
)]
fn connections_cache_opt_out_and_size_cap() {
    let env = need_env!();
    let sb = Sandbox::new(env);
    let proxy = Proxy::start_stalling(&sb, "slow", 0, 0.3);
    let image = proxy.image("layers");

    // One connection: one blob at a time.
    config(&sb, "max_connections = 1\n");
    let one = store(&sb, "one");
    sb.run(&["--store", &one, "pull", "-q", "--tls-verify=false", &image])
        .ok();
    assert_eq!(most_at_once(&proxy), 1, "{:?}", proxy.lines());

    // --no-layer-cache: the image, and no layers kept.
    config(&sb, "");
    let none = store(&sb, "none");
    let id = sb
        .run(&[
            "--store",
            &none,
            "pull",
            "-q",
            "--no-layer-cache",
            "--tls-verify=false",
            &image,
        ])
        .ok()
        .stdout();
    assert!(id.starts_with("sha256:"), "{id}");
    assert!(cached(&none).is_empty(), "{:?}", cached(&none));
    tmp_is_empty(&none);
    // The same from berth.toml.
    config(&sb, "[layer_cache]\nenabled = false\n");
    let off = store(&sb, "off");
    sb.run(&["--store", &off, "pull", "-q", "--tls-verify=false", &image])
        .ok();
    assert!(cached(&off).is_empty());

    // A size cap: the least recently used layers go until the cache fits.
    config(&sb, "[layer_cache]\nmax_size = \"1K\"\n");
    let capped = store(&sb, "capped");
    sb.run(&[
        "--store",
        &capped,
        "pull",
        "-q",
        "--tls-verify=false",
        &image,
    ])
    .ok();
    let total: u64 = fs::read_dir(PathBuf::from(&capped).join(CACHE))
        .unwrap()
        .flatten()
        .map(|e| e.metadata().unwrap().len())
        .sum();
    assert!(total <= 1024, "the cache holds {total} bytes over a 1K cap");
    sb.run(&["--store", &capped, "check"]).ok();

    // A bad size is a config error naming the key.
    config(&sb, "[layer_cache]\nmax_size = \"lots\"\n");
    let out = sb.run(&["--store", &capped, "images"]);
    assert_ne!(out.code(), 0);
    assert!(out.stderr().contains("max_size"), "{}", out.stderr());
}

/// Writes a two-layer image whose second layer is `mib` MiB of random
/// data (tests/setup/many_layers.py) and pushes it to the test registry
/// as `berth-test/NAME:v1`.
fn push_big_image(sb: &Sandbox, name: &str, mib: u32) {
    let layout = sb.dir.path().join(format!("layout-{name}"));
    let script =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/setup/many_layers.py");
    let ok = std::process::Command::new("python3")
        .arg(script)
        .arg(&layout)
        .args(["2", &mib.to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok, "many_layers.py failed");
    let ok = std::process::Command::new("skopeo")
        .args(["copy", "-q", "--insecure-policy", "--dest-tls-verify=false"])
        .arg(format!("oci:{}:v1", layout.display()))
        .arg(format!("docker://{}/berth-test/{name}:v1", sb.env.anon()))
        .status()
        .unwrap()
        .success();
    assert!(ok, "skopeo copy failed");
}

#[test]
#[cfg_attr(
    not(berth_it_env),
    ignore = "needs the test fixtures: sudo bash tests/setup/setup.sh"
)]
fn a_big_layer_comes_in_parts_or_whole_where_ranges_are_ignored() {
    let env = need_env!();
    let sb = Sandbox::new(env);
    config(&sb, "max_connections = 4\n");
    let name = format!("big-layer-{}", std::process::id());
    push_big_image(&sb, &name, 80);
    let image = |proxy: &Proxy| format!("127.0.0.1:{}/berth-test/{name}:v1", proxy.port);
    let direct = format!("{}/berth-test/{name}:v1", env.anon());
    // A pull into a store of its own; the image id.
    let pull = |s: &str, image: &str| {
        sb.run(&["--store", s, "pull", "-q", "--tls-verify=false", image])
            .ok()
            .stdout()
    };
    let want = pull(&store(&sb, "direct"), &direct);

    // 80 MiB with 4 connections, the other layer small: parts fetched at
    // once with range requests; the same image.
    let proxy = Proxy::start_stalling(&sb, "slow", 0, 0.3);
    let parts = store(&sb, "parts");
    let got = pull(&parts, &image(&proxy));
    assert_eq!(got, want);
    let big = layers_of(&sb, &parts, &image(&proxy))
        .into_iter()
        .find(|d| {
            fs::metadata(PathBuf::from(&parts).join(CACHE).join(&d[7..]))
                .is_ok_and(|m| m.len() > 64 << 20)
        })
        .expect("the big layer is cached whole");
    let ranged: Vec<String> = proxy
        .lines()
        .into_iter()
        .filter(|l| l.contains(&big) && l.contains("range=bytes="))
        .collect();
    assert!(ranged.len() >= 2, "{:?}", proxy.lines());
    assert!(most_at_once(&proxy) >= 2, "{:?}", proxy.lines());
    sb.run(&["--store", &parts, "check"]).ok();
    tmp_is_empty(&parts);

    // A registry that ignores ranges: the layer in one piece, the same image.
    let proxy = Proxy::start(&sb, "norange", 0);
    let whole = store(&sb, "whole");
    let got = pull(&whole, &image(&proxy));
    assert_eq!(got, want);
    assert!(
        proxy
            .lines()
            .iter()
            .any(|l| l.contains(&big) && l.contains("range=-")),
        "no whole download after the ignored ranges: {:?}",
        proxy.lines()
    );
    sb.run(&["--store", &whole, "check"]).ok();
    tmp_is_empty(&whole);
}

#[test]
#[cfg_attr(
    not(berth_it_env),
    ignore = "needs the test fixtures: sudo bash tests/setup/setup.sh"
)]
fn a_killed_pull_keeps_the_layers_it_finished() {
    let env = need_env!();
    let sb = Sandbox::new(env);
    config(&sb, "max_connections = 2\n");
    let proxy = Proxy::start_stalling(&sb, "slow", 0, 1.0);
    let s = store(&sb, "killed");
    let image = proxy.image("layers");
    let mut child = sb
        .berth(&["--store", &s, "pull", "-q", "--tls-verify=false", &image])
        .spawn()
        .unwrap();
    // Killed once a layer is in the cache, while others are on the way.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while cached(&s).is_empty() {
        assert!(std::time::Instant::now() < deadline, "no layer was cached");
        assert!(child.try_wait().unwrap().is_none(), "the pull ended first");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let kept = cached(&s);
    assert!(kept.len() < 4, "the pull had finished: {kept:?}");
    // Every kept blob is whole: its content has its name.
    for d in &kept {
        let bytes = fs::read(PathBuf::from(&s).join(CACHE).join(&d[7..])).unwrap();
        let hex = sha256_hex(&bytes);
        assert_eq!(&d[7..], hex, "a partial blob in the cache");
    }
    assert!(fs::read_dir(PathBuf::from(&s).join("images"))
        .unwrap()
        .next()
        .is_none());

    // The next pull fetches only what is missing, and leaves nothing behind.
    // Counted once the proxy has logged every request of the killed pull: a
    // request sent just before the kill may reach the proxy's log later
    // (it logs each on arrival, and a busy machine delays that).
    let before = settled(&proxy, std::time::Duration::from_secs(2));
    sb.run(&["--store", &s, "pull", "-q", "--tls-verify=false", &image])
        .ok();
    let layers = layers_of(&sb, &s, &image);
    let again: Vec<String> = fetched(&proxy)[before..]
        .iter()
        .filter(|d| layers.contains(*d))
        .cloned()
        .collect();
    assert_eq!(again.len(), 4 - kept.len(), "{again:?} after {kept:?}");
    assert!(again.iter().all(|d| !kept.contains(d)), "{again:?}");
    sb.run(&["--store", &s, "check"]).ok();
    tmp_is_empty(&s);
}

/// The sha256 of `bytes` in hex.
fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}
