//! An image's OCI config: parsed from its bytes, and the run-time
//! settings berth keeps of it.

use std::collections::BTreeMap;

use oci_spec::image::ImageConfiguration;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// Parses and checks an image config.
pub fn parse_config(bytes: &[u8], reference: &str) -> Result<ImageConfiguration> {
    serde_json::from_slice(bytes)
        .map_err(|e| Error::BadImage(format!("{reference}: malformed image config: {e}")))
}

/// The run-time settings (`Env`, `Entrypoint`, `Cmd`, ...) of an image config.
pub fn run_config(config: &ImageConfiguration) -> RunConfig {
    let Some(c) = config.config() else {
        return RunConfig::default();
    };
    RunConfig {
        env: c.env().clone().unwrap_or_default(),
        entrypoint: c.entrypoint().clone().unwrap_or_default(),
        cmd: c.cmd().clone().unwrap_or_default(),
        workdir: c.working_dir().clone().unwrap_or_default(),
        user: c.user().clone().unwrap_or_default(),
        labels: c
            .labels()
            .clone()
            .map(|l| l.into_iter().collect())
            .unwrap_or_default(),
        stop_signal: c.stop_signal().clone().unwrap_or_default(),
    }
}

/// The image's run-time settings, lifted from the OCI config.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct RunConfig {
    /// `Env` as `K=V` strings.
    pub env: Vec<String>,
    /// `Entrypoint`.
    pub entrypoint: Vec<String>,
    /// `Cmd`.
    pub cmd: Vec<String>,
    /// `WorkingDir`.
    pub workdir: String,
    /// `User`.
    pub user: String,
    /// `Labels`.
    pub labels: BTreeMap<String, String>,
    /// `StopSignal`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub stop_signal: String,
}
