//! A finished berth run's output, and the checks the tests make on it.

use std::process::Output;

/// A finished berth run.
pub struct Out(pub Output);

impl Out {
    pub fn code(&self) -> i32 {
        self.0.status.code().unwrap_or(-1)
    }
    pub fn stdout(&self) -> String {
        String::from_utf8_lossy(&self.0.stdout).into_owned()
    }
    pub fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.0.stderr).into_owned()
    }
    /// Asserts success.
    pub fn ok(self) -> Self {
        assert!(
            self.0.status.success(),
            "berth failed ({}):\n{}\n{}",
            self.code(),
            self.stdout(),
            self.stderr()
        );
        self
    }
    /// Asserts failure with `code` and a message containing `needle`.
    pub fn fails(self, code: i32, needle: &str) -> Self {
        assert_eq!(
            self.code(),
            code,
            "unexpected exit code; stderr:\n{}",
            self.stderr()
        );
        assert!(
            self.stderr().contains(needle),
            "stderr lacks {needle:?}:\n{}",
            self.stderr()
        );
        assert!(
            !self.stderr().contains("panicked"),
            "panic:\n{}",
            self.stderr()
        );
        self
    }
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.0.stdout)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.stdout()))
    }
}
