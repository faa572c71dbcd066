//! The exit code and message of an error that reaches `main`: every
//! library error knows its code ([`ExitStatus`], one table in
//! berth-config), anything else is [`Exit::Other`].

pub use berth_config::exit::{Exit, ExitStatus};

/// The exit code and message for an error.
pub fn describe(e: &anyhow::Error) -> (Exit, String) {
    let msg = format!("{e:#}");
    let known: [Option<&dyn ExitStatus>; 6] = [
        e.downcast_ref::<berth_image::Error>()
            .map(|x| x as &dyn ExitStatus),
        e.downcast_ref::<berth_runtime::Error>()
            .map(|x| x as &dyn ExitStatus),
        e.downcast_ref::<berth_config::ConfigError>()
            .map(|x| x as &dyn ExitStatus),
        e.downcast_ref::<berth_inject::InjectError>()
            .map(|x| x as &dyn ExitStatus),
        e.downcast_ref::<berth_engine::Error>()
            .map(|x| x as &dyn ExitStatus),
        e.downcast_ref::<berth_build::Error>()
            .map(|x| x as &dyn ExitStatus),
    ];
    let code = known
        .into_iter()
        .flatten()
        .next()
        .map_or(Exit::Other, |x| x.exit());
    (code, msg)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// README.md's table of exit codes lists exactly the codes of
    /// [`Exit`], each once.
    #[test]
    fn the_readme_table_is_the_enum() {
        let readme = include_str!("../../../README.md");
        let section = readme
            .split("### Exit codes")
            .nth(1)
            .and_then(|s| s.split("\n## ").next())
            .expect("README.md has an Exit codes section");
        let documented: Vec<u8> = section
            .lines()
            .filter_map(|l| l.strip_prefix("| "))
            .filter_map(|l| l.split(' ').next()?.parse().ok())
            .collect();
        let codes: Vec<u8> = Exit::ALL.iter().map(|e| e.code()).collect();
        assert_eq!(
            documented, codes,
            "README.md's exit code table and berth_config::exit::Exit differ"
        );
    }
}
