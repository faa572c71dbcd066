//! `berth completion` and `berth man` (issue 21): the bash script parses
//! and completes berth's commands and a command's options, zsh and fish
//! scripts are written, and every visible command gets a manual page.

use std::process::Command;

fn berth(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_berth"))
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn completions_complete_commands_and_options() {
    let out = berth(&["completion", "bash"]);
    assert!(out.status.success());
    let script = String::from_utf8(out.stdout).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("berth.bash");
    std::fs::write(&file, &script).unwrap();
    // What bash completes for `berth ru` and `berth run --fake`.
    let complete = |words: &str, cword: usize| {
        let sh = format!(
            "source {}; COMP_WORDS=({words}); COMP_CWORD={cword}; COMP_LINE='{words}'; \
             COMP_POINT=${{#COMP_LINE}}; _berth berth; printf '%s\\n' \"${{COMPREPLY[@]}}\"",
            file.display()
        );
        let out = Command::new("bash").args(["-c", &sh]).output().unwrap();
        String::from_utf8(out.stdout).unwrap()
    };
    let commands = complete("berth ru", 1);
    assert!(commands.lines().any(|l| l == "run"), "{commands}");
    let options = complete("berth run --fake", 2);
    assert!(options.lines().any(|l| l == "--fakeroot"), "{options}");
    for shell in ["zsh", "fish"] {
        let out = berth(&["completion", shell]);
        assert!(out.status.success() && out.stdout.len() > 1000, "{shell}");
    }
    let out = berth(&["completion", "tcsh"]);
    assert_eq!(
        out.status.code(),
        Some(2),
        "an unknown shell is a usage error"
    );
}

#[test]
fn manual_pages_for_every_command() {
    let dir = tempfile::tempdir().unwrap();
    let out = berth(&["man", "--dir", &dir.path().display().to_string()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for page in ["berth.1", "berth-run.1", "berth-pull.1", "berth-doctor.1"] {
        let text = std::fs::read_to_string(dir.path().join(page)).unwrap();
        assert!(
            text.starts_with(".ie \\n(.g") || text.contains(".TH"),
            "{page}"
        );
    }
    let run = std::fs::read_to_string(dir.path().join("berth-run.1")).unwrap();
    assert!(
        run.contains("root\\-emulation"),
        "the run page lists its options"
    );
    // Internal commands have none.
    assert!(!dir.path().join("berth-__keeper.1").exists());
}
