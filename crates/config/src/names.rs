//! The rule for a container's name, one for every front end: `berth run
//! --name` and `--shared`, the runtime's per-node keys and the Slurm
//! plugin's `--container-name`, so that a name srun accepts at submission
//! is one the node accepts (a name becomes a directory).

/// Most bytes in a container's name.
pub const NAME_MAX: usize = 128;

/// Most bytes in a per-node container key: the Slurm plugin's
/// `slurm-JOB-NAME.NODE` for the longest name and node name.
pub const KEY_MAX: usize = 200;

/// What a name may be, for messages.
pub const NAME_RULE: &str =
    "use 1 to 128 letters, digits, '.', '_' or '-', starting with a letter or digit";

/// What a per-node key may be, for messages.
pub const KEY_RULE: &str =
    "use 1 to 200 letters, digits, '.', '_' or '-', starting with a letter or digit";

/// Whether `name` may name a container: 1 to [`NAME_MAX`] letters,
/// digits, `.`, `_` or `-`, starting with a letter or digit.
pub fn name_ok(name: &str) -> bool {
    name.len() <= NAME_MAX && word_ok(name)
}

/// Whether `key` may be a per-node container key: a name's characters,
/// up to [`KEY_MAX`] bytes.
pub fn key_ok(key: &str) -> bool {
    key.len() <= KEY_MAX && word_ok(key)
}

fn word_ok(s: &str) -> bool {
    s.as_bytes().first().is_some_and(u8::is_ascii_alphanumeric)
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_directory_names_that_start_with_a_letter_or_digit() {
        for good in ["a", "job-1.x_y", "9lives", &"x".repeat(NAME_MAX)] {
            assert!(name_ok(good), "{good}");
        }
        for bad in [
            "",
            ".hidden",
            "-x",
            "_x",
            "a/b",
            "..",
            "a b",
            "é",
            &"x".repeat(NAME_MAX + 1),
        ] {
            assert!(!name_ok(bad), "{bad}");
        }
        assert!(key_ok(&format!(
            "slurm-4294967295-{}.{}",
            "n".repeat(NAME_MAX),
            "h".repeat(48)
        )));
        assert!(!key_ok(&"k".repeat(KEY_MAX + 1)));
    }
}
