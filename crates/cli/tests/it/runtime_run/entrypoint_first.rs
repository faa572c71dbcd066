//! `--entrypoint-first` (Pyxis's `--container-entrypoint`, issue 17): the
//! entrypoint runs on its own before the command, its output hidden
//! unless `--entrypoint-log`, and the command gets the environment it
//! left; an entrypoint that fails, or ends without running what it was
//! given, stops the run saying so. Also in a shared container's task.

use crate::harness::*;
use crate::need_env;

/// A host script bound as the entrypoint: a banner on both streams, a
/// variable, `exec "$@"` (or `exit 3` where `FAIL` is set in the image's
/// environment, which `-e` stands for here).
fn entrypoint(sb: &Sandbox) -> String {
    let script = sb.dir.path().join("ep.sh");
    std::fs::write(
        &script,
        "#!/bin/sh\necho '== BANNER =='\necho 'banner on stderr' >&2\n\
         [ -n \"$FAIL\" ] && exit 3\n[ -n \"$BG\" ] && sleep 60 &\n\
         [ -d /count ] && echo ran >> /count/runs\n\
         export FROM_ENTRYPOINT=yes\nexec \"$@\"\n",
    )
    .unwrap();
    std::process::Command::new("chmod")
        .arg("755")
        .arg(&script)
        .status()
        .unwrap();
    sb.chown_to_user(&script);
    format!("{}:/ep.sh:ro", script.display())
}

#[test]
#[cfg_attr(
    not(berth_it_env),
    ignore = "needs the test fixtures: sudo bash tests/setup/setup.sh"
)]
fn the_entrypoint_runs_first_on_its_own_and_hands_on_its_environment() {
    let env = need_env!();
    let sb = Sandbox::new(env);
    let d = sb.debian();
    let vol = entrypoint(&sb);
    let first = ["--entrypoint", "/ep.sh", "--entrypoint-first", "-v", &vol];
    let echo = "echo \"$FROM_ENTRYPOINT $0\"";
    let run = |extra: &[&str], cmd: &[&str]| {
        let mut args = vec!["run"];
        args.extend_from_slice(&first);
        args.extend_from_slice(extra);
        args.push(&d);
        args.extend_from_slice(cmd);
        sb.run(&args)
    };

    // Hidden: only the command's output, in the entrypoint's environment.
    let out = run(&[], &["sh", "-c", echo]).ok();
    assert_eq!(out.stdout(), "yes sh\n");
    assert!(!out.stderr().contains("banner"), "{}", out.stderr());
    // Shown with --entrypoint-log, before the command's.
    let out = run(&["--entrypoint-log"], &["sh", "-c", echo]).ok();
    assert_eq!(out.stdout(), "== BANNER ==\nyes sh\n");
    assert!(
        out.stderr().contains("banner on stderr"),
        "{}",
        out.stderr()
    );
    // Docker's way, for comparison: the entrypoint is the command's argv[0].
    let out = sb
        .run(&[
            "run",
            "--entrypoint",
            "/ep.sh",
            "-v",
            &vol,
            &d,
            "sh",
            "-c",
            echo,
        ])
        .ok();
    assert_eq!(out.stdout(), "== BANNER ==\nyes sh\n");

    // A process the entrypoint leaves in the background is not waited for.
    let started = std::time::Instant::now();
    let out = run(&["-e", "BG=1"], &["sh", "-c", echo]).ok();
    assert_eq!(out.stdout(), "yes sh\n");
    assert!(started.elapsed().as_secs() < 30, "{:?}", started.elapsed());

    // A failing entrypoint: its status, and its hidden output shown.
    run(&["-e", "FAIL=1"], &["true"])
        .fails(3, "the image's entrypoint (/ep.sh) failed (exit status 3)")
        .fails(3, "== BANNER ==");
    // One that ends without running its command leaves no environment.
    let mut args = vec!["run", "--entrypoint", "/bin/true", "--entrypoint-first"];
    args.extend([d.as_str(), "true"]);
    sb.run(&args)
        .fails(125, "ended without running the command it was given");

    // Tasks of a shared container: it runs once, for the container (as
    // Pyxis runs it when the container starts), and each task gets what
    // it left over its own variables.
    let count = sb.dir.path().join("count");
    std::fs::create_dir_all(&count).unwrap();
    sb.chown_to_user(&count);
    let bound = format!("{}:/count", count.display());
    let task = |var: &str, cmd: &[&str]| {
        let mut args = vec!["run", "--shared", "ep", "--linger", "5", "-v", &bound];
        args.extend_from_slice(&first);
        args.extend(["-e", var]);
        args.push(&d);
        args.extend_from_slice(cmd);
        sb.run(&args).ok().stdout()
    };
    let ns = task("TASKN=1", &["readlink", "/proc/self/ns/mnt"]);
    let show = "echo $TASKN $FROM_ENTRYPOINT; readlink /proc/self/ns/mnt";
    assert_eq!(task("TASKN=2", &["sh", "-c", show]), format!("2 yes\n{ns}"));
    assert_eq!(task("TASKN=3", &["sh", "-c", show]), format!("3 yes\n{ns}"));
    assert_eq!(
        std::fs::read_to_string(count.join("runs")).unwrap(),
        "ran\n"
    );
}
