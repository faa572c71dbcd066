use std::path::Path;

use super::*;

fn vars(k: &str) -> Option<String> {
    match k {
        "SCRATCH" => Some("/scratch/u".into()),
        "USER" => Some("u".into()),
        _ => None,
    }
}

fn write(dir: &Path, name: &str, text: &str) {
    std::fs::write(dir.join(format!("{name}.toml")), text).unwrap();
}

fn search(dir: &Path) -> SearchPath {
    SearchPath {
        dirs: vec![dir.to_path_buf()],
    }
}

#[test]
fn every_field_with_bases_and_expansion() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    write(
        d,
        "common",
        r#"
image = "docker.io#library/ubuntu:24.04"
mounts = ["${SCRATCH}:${SCRATCH}"]
workdir = "/base"
writable = true
devices = ["nvidia.com/gpu=all"]
[env]
A = "base"
GONE = "x"
[annotations]
com.hooks.cxi.enabled = "true"
"#,
    );
    write(
        d,
        "second",
        "mounts = [\"/data:/data:ro+private\"]\n[env]\nB = \"second\"\n",
    );
    write(
        d,
        "app",
        r#"
base_environment = ["common", "second"]
image = "nvcr.io#nvidia/pytorch:24.01-py3"
mounts = ["${SCRATCH}/ds.sqsh:/ds:sqsh"]
workdir = "${SCRATCH}/run-$${USER}-${NOPE:-}x"
entrypoint = false
[env]
A = "app"
GONE = ""
[annotations]
com.hooks.aws_ofi_nccl.variant = "cuda12"
com.hooks.aws_ofi_nccl.enabled = true
"#,
    );
    let env = load("app", &search(d), &vars).unwrap();
    assert_eq!(env.files.len(), 3);
    assert_eq!(
        env.image.as_deref(),
        Some("nvcr.io#nvidia/pytorch:24.01-py3")
    );
    assert_eq!(
        env.mounts,
        vec![
            "/scratch/u:/scratch/u",
            "/data:/data:ro+private",
            "/scratch/u/ds.sqsh:/ds:sqsh"
        ]
    );
    assert_eq!(env.workdir.as_deref(), Some("/scratch/u/run-${USER}-x"));
    assert_eq!(env.writable, Some(true));
    assert_eq!(env.entrypoint, Some(false));
    assert_eq!(env.devices, vec!["nvidia.com/gpu=all"]);
    assert_eq!(
        env.env,
        vec![
            ("B".to_string(), Some("second".to_string())),
            ("A".to_string(), Some("app".to_string())),
            ("GONE".to_string(), None),
        ]
    );
    assert!(env
        .annotations
        .contains(&("com.hooks.cxi.enabled".into(), "true".into())));
    assert!(env
        .annotations
        .contains(&("com.hooks.aws_ofi_nccl.variant".into(), "cuda12".into())));

    // Laid under a request: the command line adds and overrides.
    let mut req = RunRequest {
        volumes: vec!["/cli:/cli".into()],
        env: vec!["A=cli".into()],
        workdir: Some("/cli".into()),
        ..Default::default()
    };
    env.apply(&mut req, &["cxi".to_string()]).unwrap();
    assert_eq!(req.image, "nvcr.io#nvidia/pytorch:24.01-py3");
    assert_eq!(req.volumes.last().map(String::as_str), Some("/cli:/cli"));
    assert_eq!(req.volumes.len(), 4);
    assert_eq!(req.workdir.as_deref(), Some("/cli"));
    assert_eq!(req.entrypoint.as_deref(), Some(""));
    assert!(req.writable && req.env_below_image);
    assert_eq!(req.env, vec!["B=second", "A=app", "A=cli"]);
    assert_eq!(req.unset_env, vec!["GONE"]);
    assert_eq!(req.modules, vec!["cxi"]);
    assert!(req
        .annotations
        .contains(&"com.hooks.cxi.enabled=true".to_string()));
}

#[test]
fn without_a_workdir_the_image_s_is_used() {
    let tmp = tempfile::tempdir().unwrap();
    write(tmp.path(), "e", "image = \"ubuntu:24.04\"\n");
    let env = load("e", &search(tmp.path()), &vars).unwrap();
    let mut req = RunRequest::default();
    env.apply(&mut req, &[]).unwrap();
    assert!(req.workdir_image && req.workdir.is_none() && req.entrypoint.is_none());
    // The entrypoint runs first, hidden, as the Container Engine runs it;
    // its annotation shows it; --entrypoint on the command line wins.
    assert!(req.entrypoint_first && !req.entrypoint_log);
    write(
        tmp.path(),
        "log",
        "image = \"ubuntu:24.04\"\n[annotations]\ncom.pyxis.entrypoint_log = \"true\"\n",
    );
    let env = load("log", &search(tmp.path()), &vars).unwrap();
    let mut req = RunRequest::default();
    env.apply(&mut req, &[]).unwrap();
    assert!(req.entrypoint_first && req.entrypoint_log);
    let mut req = RunRequest {
        entrypoint: Some("/bin/other".into()),
        ..Default::default()
    };
    env.apply(&mut req, &[]).unwrap();
    assert!(!req.entrypoint_first);
}

#[test]
fn errors_name_the_file_and_line() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let cases = [
        ("unknown", "image = \"x\"\n\nimgae = \"y\"\n", "line 3"),
        ("badtype", "image = \"x\"\nwritable = \"yes\"\n", "line 2"),
        (
            "unset",
            "image = \"x\"\nmounts = [\n  \"/a:/a\",\n  \"${NOT_SET}:/b\",\n]\n",
            "line 4",
        ),
        ("syntax", "image = \"x\n", "line 1"),
        ("badvar", "workdir = \"${1X}\"\n", "is not a variable"),
        (
            "nobase",
            "base_environment = \"missing\"\n",
            "no environment named \"missing\"",
        ),
    ];
    for (name, text, needle) in cases {
        write(d, name, text);
        let e = load(name, &search(d), &vars).unwrap_err().to_string();
        assert!(e.contains(&format!("{name}.toml")), "{name}: {e}");
        assert!(e.contains(needle), "{name}: {e}");
    }
    let e = load("unset", &search(d), &vars).unwrap_err().to_string();
    assert!(e.contains("${NOT_SET}"), "{e}");
}

#[test]
fn loops_and_depth_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    write(d, "a", "base_environment = \"b\"\n");
    write(d, "b", "base_environment = \"a\"\n");
    let e = load("a", &search(d), &vars).unwrap_err().to_string();
    assert!(e.contains("loops back"), "{e}");
    for i in 0..12 {
        write(
            d,
            &format!("l{i}"),
            &format!("base_environment = \"l{}\"\n", i + 1),
        );
    }
    write(d, "l12", "image = \"x\"\n");
    let e = load("l0", &search(d), &vars).unwrap_err().to_string();
    assert!(e.contains("deeper than 10"), "{e}");
    let ok = load("l3", &search(d), &vars).unwrap();
    assert_eq!(ok.image.as_deref(), Some("x"));
    // No image anywhere: said when laid under a run.
    write(d, "noimage", "workdir = \"/w\"\n");
    let env = load("noimage", &search(d), &vars).unwrap();
    let e = env
        .apply(&mut RunRequest::default(), &[])
        .unwrap_err()
        .to_string();
    assert!(e.contains("no image"), "{e}");
}

#[test]
fn expansion() {
    let e = |t: &str| parse::expand(t, &vars);
    assert_eq!(e("${USER}/$HOME/$$/${X:-d}").unwrap(), "u/$HOME/$/d");
    assert!(e("${X}").unwrap_err().contains("${X}"));
    assert!(e("${USER").is_err());
}
