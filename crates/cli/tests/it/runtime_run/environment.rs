//! `berth run --environment`: CSCS's environment definition files (EDF),
//! found by name in `~/.edf` or `EDF_PATH` or given as a path, with
//! inheritance and `${VAR}` expansion; `berth environments` lists them.

use std::fs;

use crate::harness::*;
use crate::need_env;

#[test]
#[cfg_attr(
    not(berth_it_env),
    ignore = "needs the test fixtures: sudo bash tests/setup/setup.sh"
)]
fn an_environment_file_runs_as_it_says() {
    let env = need_env!();
    let sb = Sandbox::new(env);
    let image = sb.debian();
    let edf = sb.home().join(".edf");
    fs::create_dir_all(&edf).unwrap();
    let data = sb.dir.path().join("data");
    fs::create_dir_all(&data).unwrap();
    fs::write(data.join("in.txt"), "data\n").unwrap();
    fs::write(
        edf.join("base.toml"),
        format!(
            "image = \"{image}\"\nmounts = [\"${{DATA_DIR}}:/data:ro\"]\nwritable = true\n\n[env]\nFROM_BASE = \"base\"\nGREETING = \"from the file\"\n\n[annotations]\ncom.example.note = \"on\"\n"
        ),
    )
    .unwrap();
    fs::write(
        edf.join("app.toml"),
        "base_environment = \"base\"\nworkdir = \"/data\"\nentrypoint = false\n\n[env]\nFROM_APP = \"${USER_WORD:-none}\"\nTERM = \"\"\n",
    )
    .unwrap();
    sb.chown_to_user(sb.dir.path());
    let mut sb = sb;
    sb.extra_env
        .push(("DATA_DIR".into(), data.display().to_string()));
    sb.extra_env.push(("TERM".into(), "xterm".into()));
    let script = "echo \"$FROM_BASE|$FROM_APP|$GREETING|${TERM-unset}|$(pwd)\"; cat in.txt; touch /usr/x && echo writable; touch /data/x 2>/dev/null || echo data-ro";
    let out = sb
        .run(&["run", "--environment", "app", "/bin/sh", "-c", script])
        .ok()
        .stdout();
    assert_eq!(
        out,
        "base|none|from the file|unset|/data\ndata\nwritable\ndata-ro\n"
    );
    // The command line adds to and overrides the file.
    let out = sb
        .run(&[
            "run",
            "--environment",
            "app",
            "-e",
            "GREETING=cli",
            "-w",
            "/",
            "/bin/sh",
            "-c",
            "echo $GREETING $(pwd)",
        ])
        .ok()
        .stdout();
    assert_eq!(out, "cli /\n");
    // By path, and EDF_PATH replaces ~/.edf.
    let path = edf.join("app.toml");
    sb.run(&["run", "--environment", path.to_str().unwrap(), "true"])
        .ok();
    sb.extra_env
        .push(("EDF_PATH".into(), "/nonexistent".into()));
    sb.run(&["run", "--environment", "app", "true"])
        .fails(125, "no environment named \"app\"");
    sb.extra_env.pop();
    // Listed, with the image each runs.
    let out = sb.run(&["environments"]).ok().stdout();
    assert!(
        out.contains("app") && out.contains("base") && out.contains(&image),
        "{out}"
    );

    // Bad files say which file, which line and what is wrong.
    fs::write(
        edf.join("bad.toml"),
        "image = \"x\"\nmounts = [\"${NOT_SET_ANYWHERE}:/x\"]\n",
    )
    .unwrap();
    fs::write(edf.join("typo.toml"), "image = \"x\"\n\nwriteable = true\n").unwrap();
    sb.chown_to_user(&edf);
    let e = sb
        .run(&["run", "--environment", "bad", "true"])
        .fails(125, "bad.toml, line 2");
    assert!(e.stderr().contains("${NOT_SET_ANYWHERE}"), "{}", e.stderr());
    sb.run(&["run", "--environment", "typo", "true"])
        .fails(125, "typo.toml, line 3");
    let out = sb.run(&["environments"]).ok().stdout();
    assert!(
        out.contains("error: ") && out.contains("NOT_SET_ANYWHERE"),
        "{out}"
    );
}
