//! berth's own settings (the store, the config paths) travel with a job
//! as `SLURM_` copies: they pass through the container of a batch script,
//! whose srun steps then find the same store.

/// berth's settings a job was submitted with. The tasks of an srun in a
/// batch script start from the script's container environment, which does
/// not have them; a `SLURM_` copy passes through the container.
pub const CARRIED_SETTINGS: &[&str] = &[
    "BERTH_STORE",
    "BERTH_SYSTEM_CONFIG",
    "XDG_CONFIG_HOME",
    "XDG_DATA_HOME",
];

/// The name of the copy of `setting` that travels with the job.
pub fn carried_name(setting: &str) -> String {
    format!("SLURM_BERTH_ENV_{setting}")
}

/// The copies to export at submission: `(SLURM_BERTH_ENV_X, value)` for
/// each carried setting that `get` has (and no copy of yet).
pub fn settings_to_carry(get: impl Fn(&str) -> Option<String>) -> Vec<(String, String)> {
    CARRIED_SETTINGS
        .iter()
        .filter(|s| get(&carried_name(s)).is_none())
        .filter_map(|s| Some((carried_name(s), get(s).filter(|v| !v.is_empty())?)))
        .collect()
}

/// The settings to restore for a task or a resolution: `(X, value)` for
/// each carried copy whose setting `get` lacks.
pub fn settings_to_restore(get: impl Fn(&str) -> Option<String>) -> Vec<(String, String)> {
    CARRIED_SETTINGS
        .iter()
        .filter(|s| get(s).is_none())
        .filter_map(|s| Some((s.to_string(), get(&carried_name(s))?)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_travel_as_slurm_copies_and_never_override() {
        let submit = |k: &str| match k {
            "BERTH_STORE" => Some("/scratch/me/store".to_string()),
            "XDG_DATA_HOME" => Some(String::new()),
            _ => None,
        };
        assert_eq!(
            settings_to_carry(submit),
            vec![(
                "SLURM_BERTH_ENV_BERTH_STORE".to_string(),
                "/scratch/me/store".to_string()
            )]
        );
        // In the script's container: only the copy is there.
        let inside =
            |k: &str| (k == "SLURM_BERTH_ENV_BERTH_STORE").then(|| "/scratch/me/store".to_string());
        assert_eq!(
            settings_to_restore(inside),
            vec![("BERTH_STORE".to_string(), "/scratch/me/store".to_string())]
        );
        // A task that has its own value keeps it; nothing is copied twice.
        let both = |k: &str| match k {
            "BERTH_STORE" => Some("/mine".to_string()),
            "SLURM_BERTH_ENV_BERTH_STORE" => Some("/job".to_string()),
            _ => None,
        };
        assert!(settings_to_restore(both).is_empty());
        assert!(settings_to_carry(both).is_empty());
    }
}
