//! The directories of Slurm's PMIx server that a task of `srun
//! --mpi=pmix` needs in its container: the server's rendezvous files and
//! shared-memory data store live there (enroot's `50-slurm-pmi.sh` binds
//! them too). Slurm puts them in its spool directory, or in
//! `SLURM_PMIX_TMPDIR`, which a container does not otherwise see.

/// The variables naming them, as Slurm's PMIx plugin sets them.
const VARIABLES: &[&str] = &["PMIX_SERVER_TMPDIR", "PMIX_SYSTEM_TMPDIR"];

/// `-v DIR:DIR` binds for the PMIx directories named in the task's
/// environment `env` that `is_dir` finds; none without PMIx.
pub fn binds(env: &[(String, String)], is_dir: impl Fn(&str) -> bool) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for var in VARIABLES {
        let Some((_, dir)) = env.iter().find(|(k, _)| k == var) else {
            continue;
        };
        let dir = dir.trim_end_matches('/');
        // Absolute, plain paths only: the bind syntax splits on ':'.
        let plain = dir.starts_with('/') && !dir.contains(':') && !dir.contains(',');
        let bind = format!("{dir}:{dir}");
        if plain && dir != "/" && is_dir(dir) && !out.contains(&bind) {
            out.push(bind);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_servers_directories_when_they_exist() {
        let env = |pairs: &[(&str, &str)]| -> Vec<(String, String)> {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        let e = env(&[
            ("PMIX_SERVER_TMPDIR", "/var/spool/slurmd/pmix.7.0/"),
            ("PMIX_SYSTEM_TMPDIR", "/var/spool/slurmd/pmix.7.0"),
            ("PMIX_RANK", "0"),
        ]);
        assert_eq!(
            binds(&e, |_| true),
            ["/var/spool/slurmd/pmix.7.0:/var/spool/slurmd/pmix.7.0"]
        );
        assert!(binds(&e, |_| false).is_empty());
        assert!(binds(&env(&[("PMIX_SERVER_TMPDIR", "rel")]), |_| true).is_empty());
        assert!(binds(&env(&[("PMIX_SERVER_TMPDIR", "/a:b")]), |_| true).is_empty());
        assert!(binds(&env(&[]), |_| true).is_empty());
    }
}
