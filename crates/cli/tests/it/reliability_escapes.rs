//! Container escapes tried as the unprivileged user, each refused: a bind
//! target through the image's absolute symlink, device nodes, berth's own
//! process through /proc (its binary, its descriptors), and writing the
//! image. (Setuid programs, leaked descriptors and host files bound in are
//! in runtime_run::security_settings_hold.)

use std::fs;
use std::path::Path;

use crate::harness::Sandbox;
use crate::need_env;

fn debian(sb: &Sandbox) -> String {
    sb.pull("debian-python:latest");
    format!("{}/berth-test/debian-python:latest", sb.env.anon())
}

fn sh(sb: &Sandbox, image: &str, extra: &[&str], script: &str) -> crate::harness::Out {
    let mut args = vec!["run", "--entrypoint", ""];
    args.extend_from_slice(extra);
    args.extend_from_slice(&[image, "/bin/sh", "-c", script]);
    sb.run(&args)
}

#[test]
fn a_bind_target_through_the_images_absolute_symlink_stays_inside() {
    let env = need_env!();
    let sb = Sandbox::new(env);
    let d = debian(&sb);
    // The image's /var/run is a symlink to /run: resolved on the host's
    // side, a bind under it would land in the host's /run.
    let name = format!("berth-escape-{}", std::process::id());
    let src = sb.dir.path().join("payload");
    fs::write(&src, "inside\n").unwrap();
    sb.chown_to_user(&src);
    let bind = format!("{}:/var/run/{name}", src.display());
    let out = sh(&sb, &d, &["-v", &bind], &format!("cat /run/{name}"))
        .ok()
        .stdout();
    assert_eq!(out, "inside\n");
    assert!(
        !Path::new("/run").join(&name).exists(),
        "the bind escaped to the host's /run"
    );
}

#[test]
fn device_nodes_berths_process_and_the_image_are_out_of_reach() {
    let env = need_env!();
    let sb = Sandbox::new(env);
    let d = debian(&sb);
    let out = sh(
        &sb,
        &d,
        &["--writable"],
        "mknod /tmp/null2 c 1 3 2>/dev/null && echo made || echo refused; \
         mknod /dev/sda0 b 8 0 2>/dev/null && echo made || echo refused",
    )
    .ok()
    .stdout();
    assert_eq!(out, "refused\nrefused\n", "device nodes");
    // berth's supervising process (the command's parent, in the host's PID
    // namespace): neither its binary nor its descriptors (CVE-2019-5736,
    // CVE-2024-21626).
    let out = sh(
        &sb,
        &d,
        &[],
        "p=$PPID; cat /proc/$p/exe >/dev/null 2>&1 && echo read || echo refused; \
         echo x >> /proc/$p/exe 2>/dev/null && echo wrote || echo refused; \
         ls /proc/$p/fd >/dev/null 2>&1 && echo listed || echo refused; \
         ls -l /proc/$p/cwd >/dev/null 2>&1 && echo cwd || echo refused",
    )
    .ok()
    .stdout();
    assert_eq!(
        out, "refused\nrefused\nrefused\nrefused\n",
        "berth's process"
    );
    // The image, from inside: read-only, also for a file its owner could
    // write outside (the mount is the image's, not the store's file).
    let out = sh(
        &sb,
        &d,
        &[],
        "echo x > /bin/ls 2>/dev/null && echo wrote || echo refused; \
         chmod u+w /bin/ls 2>/dev/null && echo chmod || echo refused",
    )
    .ok()
    .stdout();
    assert_eq!(out, "refused\nrefused\n", "the image");
}
