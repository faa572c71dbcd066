//! `berth doctor`: what this node and this user can do with berth, checked
//! rather than assumed, each finding with what to do about it.
//!
//! - `host`: the kernel, user namespaces, subordinate ids, /dev/fuse,
//!   overlay and FUSE in a user namespace, seccomp, the squashfs tools.
//! - `site`: the configuration, the store, CDI specs and modules, the Slurm
//!   plugin.

mod host;
mod site;

use serde::Serialize;

use berth_config::Config;

/// How a check came out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// Works.
    Ok,
    /// Works with less (a fallback, a slower path), or may surprise.
    Warn,
    /// Something berth needs is missing: runs or pulls will fail.
    Fail,
}

impl Status {
    /// The word printed in the report.
    pub fn word(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Warn => "warn",
            Status::Fail => "FAIL",
        }
    }
}

/// One finding.
#[derive(Debug, Clone, Serialize)]
pub struct Check {
    /// What was checked.
    pub name: &'static str,
    /// How it came out.
    pub status: Status,
    /// What was found.
    pub detail: String,
    /// What to do, where something is wrong.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fix: Option<String>,
}

impl Check {
    fn ok(name: &'static str, detail: impl Into<String>) -> Self {
        Check {
            name,
            status: Status::Ok,
            detail: detail.into(),
            fix: None,
        }
    }

    fn warn(name: &'static str, detail: impl Into<String>, fix: impl Into<String>) -> Self {
        Check {
            name,
            status: Status::Warn,
            detail: detail.into(),
            fix: Some(fix.into()),
        }
    }

    fn fail(name: &'static str, detail: impl Into<String>, fix: impl Into<String>) -> Self {
        Check {
            name,
            status: Status::Fail,
            detail: detail.into(),
            fix: Some(fix.into()),
        }
    }
}

/// The whole report.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// `uname -r`.
    pub kernel: String,
    /// The caller: name and uid.
    pub user: String,
    /// Whether the caller is real root (kernel mounts, no user namespace).
    pub root: bool,
    /// The findings, in order.
    pub checks: Vec<Check>,
}

impl Report {
    /// Whether nothing berth needs is missing.
    pub fn passed(&self) -> bool {
        self.checks.iter().all(|c| c.status != Status::Fail)
    }
}

/// Runs every check. `config` is the resolved configuration, or why it
/// could not be read (then the store and site checks are left out).
pub fn run(config: Result<&Config, String>) -> Report {
    let uid = rustix::process::getuid().as_raw();
    let root = uid == 0;
    let user = berth_runtime::sys::getpwuid(uid)
        .map(|p| format!("{} (uid {uid})", p.name))
        .unwrap_or_else(|| format!("uid {uid}"));
    let (image_mount, overlay) = config
        .as_ref()
        .map(|c| (c.runtime.image_mount, c.runtime.overlay))
        .unwrap_or_default();
    let mut checks = host::checks(root, image_mount, overlay);
    match config {
        Ok(config) => checks.extend(site::checks(config, root)),
        Err(e) => checks.push(Check::fail(
            "configuration",
            e,
            "correct the file named (berth.toml: system, then yours, then BERTH_CONFIG)",
        )),
    }
    Report {
        kernel: host::kernel_release(),
        user,
        root,
        checks,
    }
}
