//! The environments of an entrypoint run first (`--entrypoint-first`)
//! under the plugin's policy (`--env-below-image`), split as Pyxis splits
//! them: the entrypoint sees berth's own variables, the image's, what
//! enroot imports from the task ([`IMPORTED`]) and the `--container-env`
//! names; the task's other variables go under what the entrypoint leaves,
//! and the `--container-env` names over it (entrypoint.bats 3: a
//! `DOCKER_TLS_VERIFY` exported before srun reaches the command, not the
//! entrypoint).

/// The task's variables enroot's start imports, as Pyxis hands them
/// (`NAME=` an exact name, `NAME_` a prefix).
pub const IMPORTED: &[&str] = &[
    "TERM=",
    "NVIDIA_VISIBLE_DEVICES=",
    "NVIDIA_DRIVER_CAPABILITIES=",
    "MELLANOX_VISIBLE_DEVICES=",
    "MELLANOX_MOUNT_DRIVER=",
    "SLURM_JOB_",
    "SLURM_STEP_",
    "SLURM_MPI_TYPE=",
    "SLURM_NODELIST=",
    "SLURM_NTASKS=",
    "PMIX_SECURITY_MODE=",
    "PMIX_GDS_MODULE=",
    "PMIX_PTL_MODULE=",
];

/// The host variables the entrypoint's environment is made from: those
/// in [`IMPORTED`] and the names given alone in `-e` (`--container-env`).
pub fn imported(host: &[(String, String)], env_args: &[String]) -> Vec<(String, String)> {
    host.iter()
        .filter(|(k, _)| {
            IMPORTED.iter().any(|p| match p.strip_suffix('=') {
                Some(name) => k == name,
                None => k.starts_with(p),
            }) || env_args.iter().any(|n| n == k)
        })
        .cloned()
        .collect()
}

/// The `--container-env` names with their values in the command's
/// environment `env` (the task's, with injected paths added): set over
/// what the entrypoint leaves.
pub fn named(env: &[(String, String)], env_args: &[String]) -> Vec<(String, String)> {
    env_args
        .iter()
        .filter(|n| !n.contains('='))
        .filter_map(|n| env.iter().find(|(k, _)| k == n).cloned())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn the_entrypoint_sees_enroots_imports_and_the_named_variables() {
        let host = vars(&[
            ("TERM", "dumb"),
            ("SLURM_JOB_ID", "7"),
            ("SLURM_PROCID", "3"),
            ("DOCKER_TLS_VERIFY", "1"),
            ("HF_HOME", "/data/hf"),
            ("TERMINAL", "x"),
        ]);
        let args = ["HF_HOME".to_string(), "A=b".to_string()];
        assert_eq!(
            imported(&host, &args),
            vars(&[
                ("TERM", "dumb"),
                ("SLURM_JOB_ID", "7"),
                ("HF_HOME", "/data/hf")
            ])
        );
        assert_eq!(named(&host, &args), vars(&[("HF_HOME", "/data/hf")]));
    }
}
