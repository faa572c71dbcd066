//! The image config the builder reads from a base image and writes for the
//! built one, typed.
//!
//! The OCI fields of the `config` object are oci-spec's
//! [`oci_spec::image::Config`]; the layer list and history are its
//! [`RootFs`] and [`History`]. oci-spec's
//! [`ImageConfiguration`](oci_spec::image::ImageConfiguration) itself is not
//! the model: it has no room for the Docker fields the builder writes
//! (`Shell`, `Healthcheck`) nor for whatever else a base image's config
//! carries (`container_config`, `OnBuild`, ...), which a build passes on
//! unchanged. Those are kept here as they came.
//!
//! [`ImageConfig::to_bytes`] writes the config with its keys sorted at
//! every level, as a `serde_json::Value` writes them: oci-spec keeps labels,
//! ports and volumes in `HashMap`s, whose order changes from process to
//! process, and the config's digest is the image id, which must not change
//! from one build of an unchanged Dockerfile to the next.

use std::collections::BTreeMap;

use oci_spec::image::{Config, History, RootFs};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::{Error, Result};

/// An image config (`config.json`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ImageConfig {
    /// `architecture`, Go's name (`amd64`). Kept as text: oci-spec's
    /// `Arch` does not give every name back as it read it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub architecture: Option<String>,
    /// `os` (`linux`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub os: Option<String>,
    /// `author` (MAINTAINER).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub author: Option<String>,
    /// `config`: what a container of the image runs with.
    #[serde(default)]
    pub config: RunSettings,
    /// `rootfs`: the layers' diff_ids.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rootfs: Option<RootFs>,
    /// `history`, one entry per instruction and base layer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub history: Option<Vec<History>>,
    /// Every other field of a base image's config, as it came.
    #[serde(flatten)]
    pub other: BTreeMap<String, Value>,
}

/// The config's `config` object: the OCI fields, the Docker fields the
/// builder writes, and any other field a base image had.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RunSettings {
    /// `User`, `Env`, `Entrypoint`, `Cmd`, `WorkingDir`, `Labels`,
    /// `ExposedPorts`, `Volumes`, `StopSignal`.
    #[serde(flatten)]
    pub oci: Config,
    /// `Shell` (SHELL): the shell form's command prefix.
    #[serde(rename = "Shell", default, skip_serializing_if = "Option::is_none")]
    pub shell: Option<Vec<String>>,
    /// `Healthcheck` (HEALTHCHECK).
    #[serde(
        rename = "Healthcheck",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub healthcheck: Option<Healthcheck>,
    /// Every other field, as the base image had it.
    #[serde(flatten)]
    pub other: BTreeMap<String, Value>,
}

/// Docker's `Healthcheck`: durations in nanoseconds.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct Healthcheck {
    /// `["NONE"]`, `["CMD", ARG...]` or `["CMD-SHELL", COMMAND]`.
    pub test: Vec<String>,
    /// `--interval`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interval: Option<u64>,
    /// `--timeout`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<u64>,
    /// `--start-period`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_period: Option<u64>,
    /// `--start-interval`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_interval: Option<u64>,
    /// `--retries`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retries: Option<u64>,
    /// Any other field of a base image's health check.
    #[serde(flatten)]
    pub other: BTreeMap<String, Value>,
}

impl ImageConfig {
    /// The config of `FROM scratch`: this host's platform, nothing else.
    pub fn scratch() -> Self {
        Self {
            architecture: Some(host_arch().to_string()),
            os: Some("linux".into()),
            ..Self::default()
        }
    }

    /// Parses a base image's config.json; `image` names it in the error.
    pub fn parse(bytes: &[u8], image: &str) -> Result<Self> {
        serde_json::from_slice(bytes).map_err(|e| Error::BaseConfig {
            image: image.to_string(),
            reason: e.to_string(),
        })
    }

    /// The config.json bytes: keys sorted at every level (see the module
    /// documentation), no white space.
    pub fn to_bytes(&self) -> Result<Vec<u8>> {
        let encode = |e: serde_json::Error| Error::Plan(format!("cannot encode the config: {e}"));
        let value = serde_json::to_value(self).map_err(encode)?;
        serde_json::to_vec(&value).map_err(encode)
    }

    /// `Env` as (name, value) pairs, in order.
    pub fn env(&self) -> Vec<(String, String)> {
        self.config
            .oci
            .env()
            .iter()
            .flatten()
            .filter_map(|kv| {
                kv.split_once('=')
                    .map(|(k, v)| (k.to_string(), v.to_string()))
            })
            .collect()
    }
}

/// This host's architecture as Go (and the OCI) name it.
pub fn host_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A Docker Hub style config with fields oci-spec does not know, nulls
    /// and several labels: everything comes back, keys sorted.
    #[test]
    fn a_base_config_round_trips_with_its_unknown_fields() {
        let text = r#"{"architecture":"amd64","os":"linux","created":"2024-01-01T00:00:00Z",
            "container_config":{"Hostname":"abc"},"docker_version":"20.10",
            "config":{"Env":["PATH=/bin","A=1=2"],"Cmd":["bash"],"OnBuild":null,
                      "Labels":{"z":"1","a":"2","m":"3"},"ExposedPorts":{"80/tcp":{},"443/tcp":{}},
                      "Shell":["/bin/bash","-c"],
                      "Healthcheck":{"Test":["CMD","true"],"Interval":5000000000,"Custom":1}},
            "rootfs":{"type":"layers","diff_ids":["sha256:aa"]},
            "history":[{"created_by":"x","empty_layer":true}]}"#;
        let config = ImageConfig::parse(text.as_bytes(), "base").unwrap();
        assert_eq!(
            config.env(),
            vec![("PATH".into(), "/bin".into()), ("A".into(), "1=2".into())]
        );
        assert_eq!(config.config.shell.as_deref().map(<[_]>::len), Some(2));
        let written = config.to_bytes().unwrap();
        let original: Value = serde_json::from_str(text).unwrap();
        // The same fields and values, keys sorted.
        assert_eq!(written, serde_json::to_vec(&original).unwrap());
    }

    #[test]
    fn the_bytes_do_not_depend_on_hash_map_order() {
        let mut config = ImageConfig::scratch();
        let labels = (0..20)
            .map(|i| (format!("k{i}"), format!("v{i}")))
            .collect();
        config.config.oci.set_labels(Some(labels));
        let ports = (0..20).map(|i| format!("{i}/tcp")).collect();
        config.config.oci.set_exposed_ports(Some(ports));
        let first = config.to_bytes().unwrap();
        for _ in 0..10 {
            let again = ImageConfig::parse(&first, "x").unwrap();
            assert_eq!(again.to_bytes().unwrap(), first);
        }
        let text = String::from_utf8(first).unwrap();
        assert!(text.find("\"k0\"") < text.find("\"k1\""), "{text}");
    }

    #[test]
    fn scratch_is_this_host_linux_and_an_empty_config() {
        let bytes = ImageConfig::scratch().to_bytes().unwrap();
        assert_eq!(
            String::from_utf8(bytes).unwrap(),
            format!(
                r#"{{"architecture":"{}","config":{{}},"os":"linux"}}"#,
                host_arch()
            )
        );
    }
}
