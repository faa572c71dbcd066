//! What a user asked for, as a front end (the command line, a scheduler
//! plugin) hands it over: plain data, no system calls.

use std::path::PathBuf;
use std::time::Duration;

/// A request to run a command in a container.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunRequest {
    /// The image: a name, an id or a unique id prefix.
    pub image: String,
    /// `--entrypoint` (a single program, as in Docker; empty clears it).
    pub entrypoint: Option<String>,
    /// `--entrypoint-first`: the entrypoint runs on its own before the
    /// command, which gets the environment it left.
    pub entrypoint_first: bool,
    /// `--entrypoint-log`: the entrypoint's output is shown.
    pub entrypoint_log: bool,
    /// Arguments after the image name.
    pub args: Vec<String>,
    /// `-e NAME[=VALUE]`, in order.
    pub env: Vec<String>,
    /// Variables the container does not get (an environment file's
    /// `[env]` entries with an empty value).
    pub unset_env: Vec<String>,
    /// `--env-file`, in order.
    pub env_files: Vec<PathBuf>,
    /// `--env-host`.
    pub env_host: bool,
    /// `--env-below-image`.
    pub env_below_image: bool,
    /// `--workdir-image`: the image's WORKDIR, else `/` (not the caller's
    /// directory).
    pub workdir_image: bool,
    /// `-w`.
    pub workdir: Option<String>,
    /// `-v SRC[:DST[:OPTIONS]]`, in order.
    pub volumes: Vec<String>,
    /// `--tmpfs DST[:OPTIONS]`, in order.
    pub tmpfs: Vec<String>,
    /// `--umount DST`: binds left out (home, /tmp, a site's, a `-v`).
    pub umount: Vec<String>,
    /// `--writable`.
    pub writable: bool,
    /// `--overlay DIR[:ro]`: a persistent layer on the host.
    pub overlay: Option<String>,
    /// `--save TARGET`: the container's root, saved when the command ends.
    pub save: Option<String>,
    /// `--fakeroot`.
    pub fakeroot: bool,
    /// `--root-emulation`: `auto` (the default), `seccomp` or `none`.
    pub root_emulation: Option<String>,
    /// `--no-home`.
    pub no_home: bool,
    /// `--pid`.
    pub pid: bool,
    /// `--net none`.
    pub net_none: bool,
    /// `--unshare NS,...`: `net`, `ipc`, `uts`.
    pub unshare: Vec<String>,
    /// `--timing`.
    pub timing: bool,
    /// `--gpus`.
    pub gpus: Option<String>,
    /// `--device`.
    pub devices: Vec<String>,
    /// `--module`.
    pub modules: Vec<String>,
    /// `--mpi`.
    pub mpi: bool,
    /// `--annotation KEY=VALUE`.
    pub annotations: Vec<String>,
    /// `--security-opt`.
    pub security_opt: Vec<String>,
    /// `--name`: the container's id in the OCI state and, unless `rm` or
    /// shared, a named container whose changes are kept ([`crate::named`]).
    pub name: Option<String>,
    /// `--rm`: a named container's changes are not kept.
    pub rm: bool,
    /// `--reuse` for a named container: same (the image must be the
    /// container's), any (an existing container's own image wins, as in
    /// Pyxis), existing (it must exist; no image given), new (it must not).
    pub name_reuse: berth_runtime::shared::Reuse,
    /// `--name-readonly`: the named container's changes stacked read-only
    /// (several tasks of a Slurm step on one node share it so).
    pub name_readonly: bool,
    /// `--shared KEY --linger SECONDS`.
    pub shared: Option<SharedRequest>,
    /// Look up a missing absolute command by its base name (the Slurm
    /// plugin's tasks).
    pub argv0_fallback: bool,
    /// A missing `-w` directory is an error instead of created (the Slurm
    /// plugin's `--container-workdir`, as Pyxis).
    pub workdir_must_exist: bool,
}

/// A shared container to run in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SharedRequest {
    /// Its key.
    pub key: String,
    /// How long it stays after its last task.
    pub linger: Duration,
    /// Which live container under the key the run joins.
    pub reuse: berth_runtime::shared::Reuse,
    /// Hand the join over to the caller instead of running the command
    /// ([`berth_runtime::shared::in_place`]).
    pub hand_over: bool,
}

impl RunRequest {
    /// The name of the named container whose changes this run keeps
    /// ([`crate::named`]): `--name` without `--rm` (with `--shared`, kept
    /// on the node for the shared container's later instances).
    pub fn kept_name(&self) -> Option<&str> {
        self.name.as_deref().filter(|_| !self.rm)
    }

    /// `berth shell`: the image's bash if it has one, else sh, as a login
    /// shell.
    pub fn shell(image: &str) -> Self {
        RunRequest {
            image: image.to_string(),
            entrypoint: Some("/bin/sh".to_string()),
            args: vec![
                "-c".to_string(),
                "if [ -x /bin/bash ]; then exec /bin/bash -l; else exec /bin/sh -l; fi".to_string(),
            ],
            ..RunRequest::default()
        }
    }
}
