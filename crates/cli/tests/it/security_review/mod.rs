//! Findings of the security review (../shared/notes/reviews/security.md),
//! each tried as the review describes it, as the unprivileged user: the
//! attack fails. One module a topic:
//!
//! - [`identity_files`]: the image's /etc/passwd and /etc/group, and the
//!   user's home (M2, L12).
//! - [`build_steps`]: COPY sources outside the build context, and what a
//!   RUN step can reach (H3, H2, L8).
//! - [`mounts`]: read-only binds, /dev, berth's runtime directory and the
//!   keeper's mounts, as the container sees them (M7, M1, L5, L4).
//! - [`real_root`]: berth run by real root (M5, H1, L9, L11).
//! - [`host_state`]: what berth takes from the host: stores, its runtime
//!   directory, the caller's descriptors (M6, L1, L3).
//! - [`seccomp`]: the system call filter: the caller's terminal, keyrings,
//!   profiles from a file (M4).
//! - [`live_commit`]: a running container's changes saved while it may
//!   still change them (a review of `berth commit KEY`).

mod build_steps;
mod host_state;
mod identity_files;
mod live_commit;
mod mounts;
mod real_root;
mod seccomp;

use std::fs;
use std::process::Command;

use crate::harness::Sandbox;

/// Pushes a busybox image made with umoci whose `/etc` the shell snippet
/// `etc` fills (run in the rootfs's etc/, as root), and returns its
/// reference.
pub(super) fn image_with_etc(sb: &Sandbox, name: &str, etc: &str) -> String {
    image_with(sb, name, etc, "")
}

/// [`image_with_etc`] with more `umoci config` arguments (`--config.env
/// K=V`, say).
pub(super) fn image_with(sb: &Sandbox, name: &str, etc: &str, config: &str) -> String {
    let work = sb.dir.path().join(format!("img-{name}"));
    fs::create_dir_all(&work).unwrap();
    let tag = format!("{}-{}", std::process::id(), name);
    let sh = format!(
        "set -e; cd {w}; umoci init --layout layout; umoci new --image layout:t; \
         umoci unpack --image layout:t bundle >/dev/null; r=bundle/rootfs; \
         mkdir -p $r/bin $r/etc $r/proc $r/tmp; cp /bin/busybox $r/bin/busybox; \
         for a in sh cat grep; do ln -s busybox $r/bin/$a; done; \
         (cd $r/etc && {etc}); \
         umoci repack --image layout:t bundle >/dev/null; \
         umoci config --image layout:t --config.env PATH=/bin {config} >/dev/null; \
         skopeo --insecure-policy copy -q --dest-tls-verify=false oci:layout:t \
           docker://{reg}/berth-test/identity:{tag}",
        w = work.display(),
        reg = sb.env.anon(),
    );
    let st = Command::new("sh").arg("-c").arg(&sh).status().unwrap();
    assert!(st.success(), "making the {name} image failed");
    let r = format!("{}/berth-test/identity:{tag}", sb.env.anon());
    sb.run(&["pull", "--tls-verify=false", &r]).ok();
    r
}
