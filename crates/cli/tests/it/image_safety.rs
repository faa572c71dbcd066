//! Hostile and corrupt images: refused, nothing escapes, nothing stored.

use std::fs;
use std::process::Command;

use crate::harness::Sandbox;
use crate::need_env;

#[test]
#[cfg_attr(
    not(berth_it_env),
    ignore = "needs the test fixtures: sudo bash tests/setup/setup.sh"
)]
fn malicious_layers_are_refused_naming_the_entry() {
    let env = need_env!();
    let list = fs::read_to_string(env.fixtures().join("evil.txt")).unwrap();
    let mut tried = 0;
    for line in list.lines().filter(|l| !l.trim().is_empty()) {
        let (name, entry) = line.split_once('\t').unwrap();
        let sb = Sandbox::new(env);
        let r = format!("{}/berth-test/{name}", env.anon());
        let out = sb.run(&["pull", "--tls-verify=false", &r]);
        assert_eq!(out.code(), 14, "{name}: {}", out.stderr());
        assert!(
            out.stderr().contains(&format!("{entry:?}")) || out.stderr().contains(entry),
            "{name}: message does not name {entry}: {}",
            out.stderr()
        );
        assert!(
            sb.store_entries("images").is_empty(),
            "{name}: an image was stored"
        );
        assert!(
            sb.store_entries("tmp").is_empty(),
            "{name}: leftovers {:?}",
            sb.store_entries("tmp")
        );
        tried += 1;
    }
    assert!(tried >= 8, "only {tried} malicious images");
    // Nothing landed outside: the classic targets are untouched.
    for p in ["/escape", "/abs-escape", "/tmp/escape"] {
        assert!(!std::path::Path::new(p).exists(), "{p} was created");
    }
}

/// Pushes a small unique image with skopeo, corrupts its layer blob inside
/// the registry's storage (same size, different bytes), and pulls it.
#[test]
#[cfg_attr(
    not(berth_it_env),
    ignore = "needs the test fixtures: sudo bash tests/setup/setup.sh"
)]
fn tampered_registry_blob_is_refused() {
    let env = need_env!();
    let sb = Sandbox::new(env);
    let work = sb.dir.path().join("img");
    let layout = work.join("layout");
    let unique = format!("{}-{}", std::process::id(), sb.dir.path().display());
    // Build a one-layer OCI layout with umoci from an empty rootfs plus a unique file.
    let sh = format!(
        "set -e; cd {w}; umoci init --layout layout; umoci new --image layout:t; \
         umoci unpack --image layout:t bundle >/dev/null; \
         head -c 200000 /dev/urandom > bundle/rootfs/noise; echo '{unique}' > bundle/rootfs/unique; \
         umoci repack --image layout:t bundle >/dev/null; \
         skopeo copy -q --dest-tls-verify=false oci:layout:t docker://{reg}/berth-test/tamper:{tag}",
        w = work.display(),
        reg = env.anon(),
        tag = std::process::id()
    );
    fs::create_dir_all(&work).unwrap();
    let st = Command::new("sh").arg("-c").arg(&sh).status().unwrap();
    assert!(st.success());
    let index: serde_json::Value =
        serde_json::from_slice(&fs::read(layout.join("index.json")).unwrap()).unwrap();
    let md = index["manifests"][0]["digest"]
        .as_str()
        .unwrap()
        .trim_start_matches("sha256:")
        .to_string();
    let manifest: serde_json::Value =
        serde_json::from_slice(&fs::read(layout.join("blobs/sha256").join(md)).unwrap()).unwrap();
    let layer = manifest["layers"][0]["digest"]
        .as_str()
        .unwrap()
        .trim_start_matches("sha256:")
        .to_string();
    let data = std::path::PathBuf::from(env.var("BERTH_IT_REG_ANON_STORAGE"))
        .join("docker/registry/v2/blobs/sha256")
        .join(&layer[..2])
        .join(&layer)
        .join("data");
    let mut bytes = fs::read(&data).unwrap();
    let n = bytes.len();
    bytes[n - 40] ^= 0x55;
    fs::write(&data, bytes).unwrap();
    let r = format!("{}/berth-test/tamper:{}", env.anon(), std::process::id());
    sb.run(&["pull", "--tls-verify=false", &r])
        .fails(13, &layer[..12]);
    assert!(sb.store_entries("images").is_empty());
    sb.assert_store_tmp_empty();
}
