//! `berth build` RUN steps as root without a subordinate id range (issue
//! 20): one Dockerfile (apt-get install of a package with files of another
//! owner, useradd, USER, COPY --chown) builds through the range and
//! through root emulation (`--root-emulation seccomp`) with the same files
//! and modes; what the range gives other owners is root's under emulation.
//! A user without a range gets emulation by itself, and `--root-emulation
//! subuid` is refused for them.

use std::os::unix::process::CommandExt;

use crate::harness::{Out, Sandbox};
use crate::need_env;
use crate::runtime_run::root_emulation::{owned_deb, sandbox_of_user_without_range};

const DOCKERFILE: &str = r#"ARG BASE
FROM $BASE
COPY owned.deb /tmp/owned.deb
RUN apt-get install -y -q /tmp/owned.deb >/dev/null && rm /tmp/owned.deb \
 && useradd -u 1234 -m app && chown app: /srv/app
USER app
RUN touch /srv/app/made-by-app
COPY --chown=app:app f.txt /srv/app/f.txt
"#;

/// What the test lists of an image: path, owner, mode.
const LIST: &str = "find /usr/share/berth-owned /var/spool/berth /home/app /srv/app \
                    -printf '%p %U:%G %m\\n' | sort";

/// A build context with the Dockerfile, the package and f.txt.
fn context(sb: &Sandbox) -> String {
    let ctx = sb.dir.path().join("ctx");
    std::fs::create_dir_all(&ctx).unwrap();
    std::fs::write(ctx.join("Dockerfile"), DOCKERFILE).unwrap();
    std::fs::write(ctx.join("f.txt"), "f\n").unwrap();
    std::fs::copy(owned_deb(sb.dir.path()), ctx.join("owned.deb")).unwrap();
    sb.chown_to_user(sb.dir.path());
    ctx.display().to_string()
}

/// `berth build` of `ctx` as `tag`, with `extra` options.
fn build(sb: &Sandbox, ctx: &str, tag: &str, extra: &[&str], user: Option<(u32, u32)>) -> Out {
    let base = format!("BASE={}/berth-test/debian-python:latest", sb.env.anon());
    let mut args = vec![
        "build",
        "--tls-verify=false",
        "--build-arg",
        &base,
        "-t",
        tag,
    ];
    args.extend_from_slice(extra);
    args.push(ctx);
    let mut c = sb.berth(&args);
    if let Some((u, g)) = user {
        c.uid(u).gid(g);
    }
    Out(c.output().unwrap())
}

#[test]
#[cfg_attr(
    not(berth_it_env),
    ignore = "needs the test fixtures: sudo bash tests/setup/setup.sh"
)]
fn emulated_builds_have_the_files_of_subordinate_id_builds() {
    let env = need_env!();
    let sb = Sandbox::new(env);
    let ctx = context(&sb);
    let ranged = build(&sb, &ctx, "ranged:1", &[], None).ok();
    assert!(
        !ranged.stderr().contains("root emulation"),
        "{}",
        ranged.stderr()
    );
    let emulated = build(
        &sb,
        &ctx,
        "emulated:1",
        &["--root-emulation", "seccomp"],
        None,
    )
    .ok();
    // Not the first build's cache: other owners.
    assert!(
        emulated
            .stderr()
            .contains("RUN steps run under root emulation")
            && !emulated.stderr().contains("(cached)"),
        "{}",
        emulated.stderr()
    );
    let list = |tag: &str| {
        sb.run(&["run", "--fakeroot", tag, "/bin/sh", "-c", LIST])
            .ok()
            .stdout()
    };
    let (ranged, emulated) = (list("ranged:1"), list("emulated:1"));
    for want in [
        "/usr/share/berth-owned/README 0:0 644",
        "/var/spool/berth/job 7:7 644",
        "/srv/app/made-by-app 1234:1234 644",
        "/srv/app/f.txt 1234:1234 644",
    ] {
        assert!(ranged.contains(want), "{want} in {ranged}");
    }
    let without_owner = |l: &str| -> Vec<String> {
        l.lines()
            .map(|l| {
                let f: Vec<&str> = l.split(' ').collect();
                format!("{} {}", f[0], f[2])
            })
            .collect()
    };
    assert_eq!(without_owner(&ranged), without_owner(&emulated));
    assert!(
        emulated.lines().all(|l| l.contains(" 0:0 ")),
        "every file root's: {emulated}"
    );

    // A user without a range: emulation by itself; subuid refused.
    let sb = Sandbox::new(env);
    let ctx = context(&sb);
    let (uid, gid) = sandbox_of_user_without_range(&sb);
    let out = build(&sb, &ctx, "auto:1", &[], Some((uid, gid))).ok();
    assert!(
        out.stderr().contains("RUN steps run under root emulation"),
        "{}",
        out.stderr()
    );
    build(
        &sb,
        &ctx,
        "subuid:1",
        &["--root-emulation", "subuid"],
        Some((uid, gid)),
    )
    .fails(2, "you have no subordinate id range");
}
