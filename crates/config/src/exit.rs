//! berth's exit codes: one table for every command (docs/reference/exit-codes.md
//! is checked against it by a test of the binary).
//!
//! `berth run`, `berth shell` and `berth exec` exit with the command's
//! code; their own failures are [`Exit::Berth`] (podman's 125), a command
//! that cannot be executed [`Exit::NotExecutable`] or found
//! [`Exit::CommandNotFound`].

/// An exit code of berth.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Exit {
    /// Success.
    Success = 0,
    /// A failure no other class claims.
    Other = 1,
    /// Usage: a bad flag, reference, platform or import source.
    Usage = 2,
    /// A configuration file is invalid.
    Config = 3,
    /// Not found: an image, tag or digest unknown to the registry or
    /// store; an input file missing.
    NotFound = 10,
    /// The registry refused the credentials.
    Auth = 11,
    /// The registry was unreachable or kept failing after retries.
    Network = 12,
    /// A blob, layer or image file does not match its digest or size.
    Integrity = 13,
    /// A malformed manifest, config or tar, an unsupported format, or an
    /// unsafe layer.
    BadImage = 14,
    /// The store: disk full, quota, permissions.
    Store = 15,
    /// A host tool berth needs is missing or failed.
    HostTool = 16,
    /// Host resources: a module, CDI device or GPU this node cannot give.
    HostResource = 17,
    /// A build failed: a Dockerfile error or a failing step.
    Build = 18,
    /// `run`, `shell`, `exec`, `build`: berth's own failure (podman's
    /// code): the container or the build's worker did not start.
    Berth = 125,
    /// `run`, `shell`, `exec`: the command cannot be executed.
    NotExecutable = 126,
    /// `run`, `shell`, `exec`: the command is not in the container.
    CommandNotFound = 127,
}

impl Exit {
    /// Every code, in order.
    pub const ALL: &'static [Exit] = &[
        Exit::Success,
        Exit::Other,
        Exit::Usage,
        Exit::Config,
        Exit::NotFound,
        Exit::Auth,
        Exit::Network,
        Exit::Integrity,
        Exit::BadImage,
        Exit::Store,
        Exit::HostTool,
        Exit::HostResource,
        Exit::Build,
        Exit::Berth,
        Exit::NotExecutable,
        Exit::CommandNotFound,
    ];

    /// The process exit code.
    pub const fn code(self) -> u8 {
        self as u8
    }
}

impl From<Exit> for std::process::ExitCode {
    fn from(e: Exit) -> Self {
        std::process::ExitCode::from(e.code())
    }
}

/// An error that knows its exit code.
pub trait ExitStatus {
    /// The code a command that fails with this error exits with.
    fn exit(&self) -> Exit;
}

impl ExitStatus for crate::ConfigError {
    fn exit(&self) -> Exit {
        Exit::Config
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_distinct_and_in_order() {
        let codes: Vec<u8> = Exit::ALL.iter().map(|e| e.code()).collect();
        let mut sorted = codes.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(codes, sorted);
    }
}
