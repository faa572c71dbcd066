//! OCI hooks (hooks.d JSON 1.0.0): stages, `when` conditions, the OCI
//! state on stdin, the bundle, the environment protocol
//! (`BERTH_SETENV NAME=VALUE`), and a failing hook stopping the start.

use std::fs;

use crate::harness::Sandbox;
use crate::need_env;

fn hook(sb: &Sandbox, file: &str, stage: &str, when: &str, script: &str) {
    let dir = sb.dir.path().join("hooks.d");
    fs::create_dir_all(&dir).unwrap();
    let json = serde_json::json!({
        "version": "1.0.0",
        "hook": { "path": "/bin/sh", "args": ["sh", "-c", script], "timeout": 20 },
        "when": serde_json::from_str::<serde_json::Value>(when).unwrap(),
        "stages": [stage],
    });
    fs::write(dir.join(file), json.to_string()).unwrap();
    sb.chown_to_user(&dir);
    fs::write(
        sb.dir.path().join("no-site-config.toml"),
        format!("[host]\nhooks_dirs = [\"{}\"]\n", dir.display()),
    )
    .unwrap();
}

#[test]
#[cfg_attr(
    not(berth_it_env),
    ignore = "needs the test fixtures: sudo bash tests/setup/setup.sh"
)]
fn hooks_run_at_their_stages_with_state_and_env() {
    let env = need_env!();
    let sb = Sandbox::new(env);
    let out_dir = sb.dir.path().join("out");
    fs::create_dir_all(&out_dir).unwrap();
    sb.chown_to_user(&out_dir);
    let o = out_dir.display();
    hook(
        &sb,
        "10-runtime.json",
        "createRuntime",
        r#"{"always": true}"#,
        &format!(
            "cat > {o}/runtime.json; b=$(sed 's/.*\"bundle\":\"\\([^\"]*\\)\".*/\\1/' {o}/runtime.json); cp \"$b/config.json\" {o}/config.json; echo BERTH_SETENV RT=from-runtime"
        ),
    );
    hook(
        &sb,
        "20-gpu.json",
        "createContainer",
        r#"{"annotations": {"^com\\.example\\.gpu$": "^true$"}}"#,
        "echo BERTH_SETENV CC=from-container",
    );
    hook(
        &sb,
        "30-start.json",
        "startContainer",
        r#"{"commands": [".*/sh$"]}"#,
        "echo BERTH_SETENV SC=from-start",
    );
    hook(
        &sb,
        "40-stop.json",
        "poststop",
        r#"{"always": true}"#,
        &format!("cat > {o}/poststop.json"),
    );
    let img = format!("{}/berth-test/debian-python:latest", env.anon());
    sb.run(&["pull", "-q", "--tls-verify=false", &img]).ok();

    let out = sb
        .run(&[
            "run",
            "--name",
            "job42",
            "--annotation",
            "com.example.gpu=true",
            &img,
            "/bin/sh",
            "-c",
            "echo \"$RT $CC $SC\"",
        ])
        .ok()
        .stdout();
    assert_eq!(out.trim(), "from-runtime from-container from-start");

    let state: serde_json::Value =
        serde_json::from_str(&fs::read_to_string(out_dir.join("runtime.json")).unwrap()).unwrap();
    assert_eq!(state["id"], "job42");
    assert_eq!(state["status"], "created");
    assert_eq!(state["annotations"]["com.example.gpu"], "true");
    assert!(state["pid"].as_i64().unwrap() > 1);
    let config: serde_json::Value =
        serde_json::from_str(&fs::read_to_string(out_dir.join("config.json")).unwrap()).unwrap();
    assert_eq!(
        config["root"]["path"],
        format!("/proc/{}/root", state["pid"])
    );
    let stop: serde_json::Value =
        serde_json::from_str(&fs::read_to_string(out_dir.join("poststop.json")).unwrap()).unwrap();
    assert_eq!(stop["status"], "stopped");

    // Without the annotation, and with another command, those hooks stay out.
    let out = sb
        .run(&[
            "run",
            &img,
            "python3",
            "-c",
            "import os; print(os.environ.get('CC'), os.environ.get('SC'), os.environ.get('RT'))",
        ])
        .ok()
        .stdout();
    assert_eq!(out.trim(), "None None from-runtime");
}

#[test]
#[cfg_attr(
    not(berth_it_env),
    ignore = "needs the test fixtures: sudo bash tests/setup/setup.sh"
)]
fn a_failing_hook_stops_the_start_and_says_why() {
    let env = need_env!();
    let sb = Sandbox::new(env);
    hook(
        &sb,
        "broken.json",
        "createRuntime",
        r#"{"annotations": {"^fail$": "^yes$"}}"#,
        "echo 'the site GPU hook is broken' >&2; exit 4",
    );
    let img = format!("{}/berth-test/debian-python:latest", env.anon());
    sb.run(&["pull", "-q", "--tls-verify=false", &img]).ok();
    let out = sb
        .run(&[
            "run",
            "--annotation",
            "fail=yes",
            &img,
            "sh",
            "-c",
            "echo started",
        ])
        .fails(125, "the site GPU hook is broken");
    assert!(
        out.stderr().contains("createRuntime hook /bin/sh failed"),
        "{}",
        out.stderr()
    );
    assert!(!out.stdout().contains("started"));
    sb.run(&["run", &img, "true"]).ok();
    // A malformed hook file is named.
    fs::write(
        sb.dir.path().join("hooks.d/bad.json"),
        "{\"version\": \"2.0\"}",
    )
    .unwrap();
    sb.run(&["run", &img, "true"]).fails(125, "bad.json");
}
