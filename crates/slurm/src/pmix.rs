//! What a task of `srun --mpi=pmix` needs from Slurm's PMIx server in its
//! container, as enroot's `50-slurm-pmi.sh` hook gives it: the server's
//! directory (rendezvous files, the shared-memory data store) and the
//! step's application directory, which live in slurmd's spool directory
//! or `SLURM_PMIX_TMPDIR`, out of the container's sight; and the
//! `PMIX_MCA_*` forms of the server's module choices, which PMIx clients
//! in images read.

/// `-v DIR:DIR` binds for the PMIx directories of the task's environment
/// `env` that `is_dir` finds: `PMIX_SERVER_TMPDIR`, and the step's
/// `spmix_appdir_[UID_]JOB.STEP` in the system temporary directory
/// (`PMIX_SYSTEM_TMPDIR`, else `TMPDIR`, `TEMP`, `TMP`, `/tmp`). None
/// without PMIx.
pub fn binds(env: &[(String, String)], is_dir: impl Fn(&str) -> bool) -> Vec<String> {
    let get = |k: &str| {
        env.iter()
            .find(|(n, _)| n == k)
            .map(|(_, v)| v.trim_end_matches('/').to_string())
            .filter(|v| !v.is_empty())
    };
    if !env.iter().any(|(k, _)| k.starts_with("PMIX_")) {
        return Vec::new();
    }
    let mut dirs: Vec<String> = get("PMIX_SERVER_TMPDIR").into_iter().collect();
    if let (Some(job), Some(step)) = (get("SLURM_JOB_ID"), get("SLURM_STEP_ID")) {
        let system = ["PMIX_SYSTEM_TMPDIR", "TMPDIR", "TEMP", "TMP"]
            .iter()
            .find_map(|k| get(k))
            .unwrap_or_else(|| "/tmp".to_string());
        let with_uid =
            get("SLURM_JOB_UID").map(|uid| format!("{system}/spmix_appdir_{uid}_{job}.{step}"));
        let without = format!("{system}/spmix_appdir_{job}.{step}");
        dirs.extend(with_uid.filter(|d| is_dir(d)).or(Some(without)));
    }
    let mut out: Vec<String> = Vec::new();
    for dir in dirs {
        // Absolute, plain paths only: the bind syntax splits on ':' and ','.
        let plain = dir.starts_with('/') && !dir.contains([':', ',']) && dir != "/";
        let bind = format!("{dir}:{dir}");
        if plain && is_dir(&dir) && !out.contains(&bind) {
            out.push(bind);
        }
    }
    out
}

/// `PMIX_MCA_ptl`, `_psec` and `_gds` from the server's
/// `PMIX_PTL_MODULE`, `PMIX_SECURITY_MODE` and `PMIX_GDS_MODULE`, where
/// `env` has the latter and not the former.
pub fn mca_variables(env: &[(String, String)]) -> Vec<(String, String)> {
    let has = |k: &str| env.iter().any(|(n, _)| n == k);
    [
        ("PMIX_MCA_ptl", "PMIX_PTL_MODULE"),
        ("PMIX_MCA_psec", "PMIX_SECURITY_MODE"),
        ("PMIX_MCA_gds", "PMIX_GDS_MODULE"),
    ]
    .iter()
    .filter(|(mca, _)| !has(mca))
    .filter_map(|(mca, from)| {
        env.iter()
            .find(|(n, _)| n == from)
            .map(|(_, v)| (mca.to_string(), v.clone()))
    })
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn the_servers_and_the_steps_directories_when_they_exist() {
        let e = env(&[
            ("PMIX_SERVER_TMPDIR", "/var/spool/slurmd/pmix.7.0/"),
            ("PMIX_SYSTEM_TMPDIR", "/var/spool/slurmd"),
            ("PMIX_RANK", "0"),
            ("SLURM_JOB_ID", "7"),
            ("SLURM_STEP_ID", "0"),
            ("SLURM_JOB_UID", "1000"),
        ]);
        assert_eq!(
            binds(&e, |_| true),
            [
                "/var/spool/slurmd/pmix.7.0:/var/spool/slurmd/pmix.7.0",
                "/var/spool/slurmd/spmix_appdir_1000_7.0:/var/spool/slurmd/spmix_appdir_1000_7.0"
            ]
        );
        // Older Slurm: no uid in the name.
        let old = binds(&e, |d| !d.contains("_1000_"));
        assert_eq!(
            old[1],
            "/var/spool/slurmd/spmix_appdir_7.0:/var/spool/slurmd/spmix_appdir_7.0"
        );
        assert!(binds(&e, |_| false).is_empty());
        assert!(binds(&env(&[("SLURM_JOB_ID", "7")]), |_| true).is_empty());
        assert!(binds(&env(&[("PMIX_SERVER_TMPDIR", "rel")]), |_| true).is_empty());
        assert!(binds(&env(&[("PMIX_SERVER_TMPDIR", "/a:b")]), |_| true).is_empty());
    }

    #[test]
    fn mca_forms_of_the_servers_choices() {
        let e = env(&[
            ("PMIX_PTL_MODULE", "tcp,usock"),
            ("PMIX_SECURITY_MODE", "munge,native"),
            ("PMIX_GDS_MODULE", "ds21,ds12,hash"),
            ("PMIX_MCA_gds", "hash"),
        ]);
        assert_eq!(
            mca_variables(&e),
            env(&[
                ("PMIX_MCA_ptl", "tcp,usock"),
                ("PMIX_MCA_psec", "munge,native")
            ])
        );
    }
}
