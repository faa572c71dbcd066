#![forbid(unsafe_code)]
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]
//! End-to-end tests: the real `berth` binary, run as an unprivileged user,
//! against real registries and images made by `tests/setup/setup.sh`.

mod cli_docs;
mod doctor;
mod harness;
mod harness_auth;
mod harness_fuse;
mod harness_out;
mod harness_proxy;
mod image_build;
mod image_build_emulation;
mod tree;

mod host_hooks;
mod host_inject;
mod host_modules_examples;
mod host_mpi;
mod image_files;
mod image_import;
mod image_layer_cache;
mod image_proxy;
mod image_pull;
mod image_registries_conf;
mod image_safety;
mod image_store;
mod image_token;
mod reliability_crash;
mod reliability_escapes;
mod reliability_faults;
mod reliability_load;
mod runtime_run;
mod runtime_shared;
mod security_review;
mod slurm_cgroup;
mod slurm_edf;
mod slurm_entrypoint;
mod slurm_global;
mod slurm_join;
mod slurm_pyxis;
mod slurm_pyxis_ids;
mod slurm_pyxis_named;
mod slurm_spank;
mod slurm_srun;
mod squashfs_profile;
mod squashfs_save;
mod squashfs_server;
