//! berth's Slurm SPANK plugin: `srun --container-image=IMAGE CMD` (and
//! `sbatch`/`salloc`) runs each task in a berth container, one per node that
//! all tasks of the step join (default) or one per task. Pyxis's option
//! names, plus `--container-mode`, `--container-gpus` and
//! `--container-modules`.
//!
//! Install (one line in plugstack.conf; arguments optional):
//!
//! ```text
//! required /usr/local/lib/berth/libberth_spank.so berth=/usr/local/bin/berth batch_modules=slurm
//! ```
//!
//! (`batch_modules`: site modules for batch scripts' containers, such as one
//! that binds the host's Slurm client so the script's srun works.)
//!
//! Where it acts:
//! - srun (local context, as the user): `local_user_init` pulls a registry
//!   image once for the job step into the user's store and pins it: the
//!   tasks get its id (`SLURM_BERTH_IMAGE`), so every node runs the same
//!   image even if the tag moves. A failed pull is one line in srun's
//!   output and the step does not start.
//! - slurmstepd (remote, in each task as the user, just before exec):
//!   `task_init` starts `berth run` with the task's command line and
//!   environment (PMI variables and descriptors included): the task
//!   execs berth there (Slurm 22.05, which the plugin is built and tested
//!   against, has no `spank_prepend_task_argv`), so a TaskProlog and
//!   propagated resource limits do not apply inside the container.
//! - job epilog (root, each node): named containers of the job go.

pub mod carried;
pub mod epilog;
pub mod gather;
pub mod handoff;
pub mod images;
pub mod in_place;
pub mod mounts;
pub mod options;
pub mod pmix;

#[cfg(not(test))]
mod plugin;

/// The Slurm version the plugin is built for (`plugin_version`), from
/// build.rs; 0 when no Slurm was found at build time.
pub const BUILT_FOR: u32 = parse_decimal(env!("BERTH_SLURM_VERSION_NUMBER"));

/// Where [`BUILT_FOR`] came from (a header, `srun --version`, the
/// environment).
pub const BUILT_FOR_FROM: &str = env!("BERTH_SLURM_VERSION_FROM");

const fn parse_decimal(s: &str) -> u32 {
    let b = s.as_bytes();
    let mut i = 0;
    let mut n: u32 = 0;
    while i < b.len() {
        n = n * 10 + (b[i] - b'0') as u32;
        i += 1;
    }
    n
}
