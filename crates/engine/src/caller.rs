//! Who is asking, read once from the process: ids, user database entry,
//! home, working directory, host name and environment. Everything after
//! this is a function of it (and of the request and the configuration).

use std::path::PathBuf;
use std::time::Instant;

use berth_runtime::sys::{self, Passwd};

/// The caller of a run.
#[derive(Debug, Clone)]
pub struct Caller {
    /// Real uid.
    pub uid: u32,
    /// Real gid.
    pub gid: u32,
    /// The user database's entry for `uid`.
    pub user: Option<Passwd>,
    /// The name of group `gid`.
    pub group: Option<String>,
    /// `$HOME` as the caller has it (absolute), else the user database's.
    pub home: Option<PathBuf>,
    /// The working directory (`/` if it is gone).
    pub cwd: PathBuf,
    /// The node's host name.
    pub hostname: String,
    /// The environment (names and values that are UTF-8).
    pub env: Vec<(String, String)>,
    /// berth's own binary.
    pub berth_exe: PathBuf,
    /// When berth started (for `--timing`).
    pub started: Instant,
    /// berth's pid (names containers without `--name`).
    pub pid: u32,
}

impl Caller {
    /// The calling process.
    pub fn current(started: Instant) -> std::io::Result<Self> {
        let uid = rustix::process::getuid().as_raw();
        let gid = rustix::process::getgid().as_raw();
        let user = sys::getpwuid(uid);
        let home = std::env::var_os("HOME")
            .map(PathBuf::from)
            .filter(|h| h.is_absolute())
            .or_else(|| user.as_ref().map(|p| PathBuf::from(&p.home)));
        Ok(Caller {
            uid,
            gid,
            group: sys::group_name(gid),
            user,
            home,
            cwd: std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/")),
            hostname: rustix::system::uname()
                .nodename()
                .to_string_lossy()
                .into_owned(),
            env: std::env::vars_os()
                .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
                .collect(),
            berth_exe: std::env::current_exe()?,
            started,
            pid: std::process::id(),
        })
    }

    /// Whether the caller is real root.
    pub fn is_root(&self) -> bool {
        self.uid == 0
    }

    /// The caller's variable `name`.
    pub fn var(&self, name: &str) -> Option<&str> {
        self.env
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// The login name (`uUID` without a user database entry).
    pub fn user_name(&self) -> String {
        self.user
            .as_ref()
            .map(|p| p.name.clone())
            .unwrap_or_else(|| format!("u{}", self.uid))
    }
}
