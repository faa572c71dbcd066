//! The exit code and message of an error that reaches `main`: every
//! library error knows its code ([`ExitStatus`], one table in
//! berth-config), anything else is [`Exit::Other`].

pub use berth_config::exit::{Exit, ExitStatus};

/// The exit code and message for an error.
pub fn describe(e: &anyhow::Error) -> (Exit, String) {
    let msg = message(e);
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

/// The error and its causes, each said once: an error whose own message
/// already includes its cause's (`cannot read FILE: No such file`) does
/// not get it appended again.
pub fn message(e: &anyhow::Error) -> String {
    let mut msg = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if msg.is_empty() {
            msg = text;
        } else if !msg.contains(&text) {
            msg.push_str(": ");
            msg.push_str(&text);
        }
    }
    msg
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn causes_are_said_once() {
        let io = std::io::Error::from(std::io::ErrorKind::NotFound);
        let e = anyhow::Error::new(berth_image::Error::Input {
            path: "./x.sif".into(),
            source: io,
        });
        let (_, msg) = describe(&e);
        assert_eq!(msg.matches("not found").count(), 1, "{msg}");
        let e = anyhow::anyhow!("inner").context("outer");
        assert_eq!(describe(&e).1, "outer: inner");
    }

    /// docs/reference/exit-codes.md's table lists exactly the codes of
    /// [`Exit`], each once.
    #[test]
    fn the_documented_table_is_the_enum() {
        let page = include_str!("../../../docs/reference/exit-codes.md");
        let documented: Vec<u8> = page
            .lines()
            .filter_map(|l| l.strip_prefix("| "))
            .filter_map(|l| l.split(' ').next()?.parse().ok())
            .collect();
        let codes: Vec<u8> = Exit::ALL.iter().map(|e| e.code()).collect();
        assert_eq!(
            documented, codes,
            "docs/reference/exit-codes.md's table and berth_config::exit::Exit differ"
        );
    }
}
