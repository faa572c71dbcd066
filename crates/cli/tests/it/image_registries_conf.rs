//! The system's registries.conf (containers-registries.conf(5) v2, here
//! through CONTAINERS_REGISTRIES_CONF) applies to berth's pulls as to
//! podman's (issue 19): a prefix rewritten to another location (insecure
//! there), a mirror tried before a registry that does not resolve, a
//! blocked prefix refused, `pull-from-mirror = "digest-only"` keeping
//! tags off the mirror, and short names through `[aliases]` and
//! `unqualified-search-registries`.

use crate::harness::*;
use crate::need_env;

#[test]
#[cfg_attr(
    not(berth_it_env),
    ignore = "needs the test fixtures: sudo bash tests/setup/setup.sh"
)]
fn registries_conf_rewrites_mirrors_and_blocks() {
    let env = need_env!();
    let reg = env.anon();
    let mut sb = Sandbox::new(env);
    let conf = sb.dir.path().join("registries.conf");
    std::fs::write(
        &conf,
        format!(
            r#"unqualified-search-registries = ["nothere.invalid", "{reg}"]

[aliases]
"debian-alias" = "{reg}/berth-test/debian-python"

[[registry]]
prefix = "{reg}"
insecure = true

[[registry]]
prefix = "rewritten.invalid/berth"
location = "{reg}/berth-test"
insecure = true

[[registry]]
prefix = "mirrored.invalid"
[[registry.mirror]]
location = "{reg}"
insecure = true

[[registry]]
prefix = "{reg}/berth-test/layers"
blocked = true

[[registry]]
prefix = "pinned.invalid"
pull-from-mirror = "digest-only"
[[registry.mirror]]
location = "{reg}"
insecure = true
"#
        ),
    )
    .unwrap();
    sb.extra_env.push((
        "CONTAINERS_REGISTRIES_CONF".into(),
        conf.display().to_string(),
    ));
    // Names that do not resolve fail at once.
    sb.site_config("[network]\nattempts = 1\n");

    // No --tls-verify=false: the table's insecure applies to its location.
    let id = sb
        .run(&["pull", "-q", "rewritten.invalid/berth/debian-python:latest"])
        .ok()
        .stdout();
    let names = sb.run(&["images"]).ok().stdout();
    assert!(
        names.contains("rewritten.invalid/berth/debian-python"),
        "{names}"
    );
    let mirrored = sb
        .run(&[
            "pull",
            "-q",
            "mirrored.invalid/berth-test/debian-python:latest",
        ])
        .ok()
        .stdout();
    assert_eq!(id, mirrored, "the same image from the mirror");
    // The record says where it came from.
    let source = sb
        .run(&[
            "inspect",
            "mirrored.invalid/berth-test/debian-python:latest",
        ])
        .ok()
        .stdout();
    assert!(
        source.contains(&format!(
            "\"source\": \"{reg}/berth-test/debian-python:latest\""
        )),
        "{source}"
    );
    sb.run(&[
        "pull",
        "--tls-verify=false",
        &format!("{reg}/berth-test/layers"),
    ])
    .fails(2, "blocked by the registries configuration");
    // A tag does not go to a digest-only mirror: the registry itself, which
    // does not resolve.
    let out = sb.run(&["pull", "pinned.invalid/berth-test/debian-python:latest"]);
    assert_eq!(out.code(), 12, "{}", out.stderr());
    let inspect: serde_json::Value = serde_json::from_str(
        &sb.run(&["inspect", "rewritten.invalid/berth/debian-python:latest"])
            .ok()
            .stdout(),
    )
    .unwrap();
    let digest = inspect["manifest_digest"]
        .as_str()
        .expect("a manifest digest");
    // Short names: an alias, and the search registries in order (the first
    // does not resolve); stored under the short and the full name.
    sb.run(&["pull", "-q", "debian-alias"]).ok();
    let out = sb
        .run(&["run", "debian-alias", "cat", "/etc/debian_version"])
        .ok()
        .stdout();
    assert!(out.starts_with("12."), "{out}");
    let out = sb.run(&["pull", "-q", "berth-test/debian-python:latest"]);
    assert!(
        out.ok().stderr().contains("nothere.invalid"),
        "the first search registry was tried"
    );
    let names = sb.run(&["images"]).ok().stdout();
    assert!(
        names.contains("docker.io/library/debian-alias")
            && names.contains("docker.io/berth-test/debian-python"),
        "{names}"
    );
    sb.run(&[
        "pull",
        "-q",
        &format!("pinned.invalid/berth-test/debian-python@{digest}"),
    ])
    .ok();
}
