//! Run settings of an image file without an OCI config, read from the
//! image itself:
//!
//! - An Apptainer/Singularity image (it has `/.singularity.d`): the
//!   command runs after `/.singularity.d/env/*.sh` are sourced in name
//!   order, as Apptainer's action scripts do (`01-base.sh`,
//!   `10-docker2singularity.sh`, `90-environment.sh`, ... `99-base.sh`);
//!   the default command is `/.singularity.d/runscript` (`apptainer run`),
//!   a command given replaces it (`apptainer exec`); labels come from
//!   `/.singularity.d/labels.json`.
//! - An enroot image (it has `/etc/rc`): the environment is
//!   `/etc/environment` (`KEY=VALUE` lines, what `enroot import` writes
//!   from the Docker `Env`), and the command runs through `/etc/rc`, which
//!   changes to the image's working directory and runs its entrypoint and
//!   command (a command given replaces the command, as `enroot start`).
//! - Any other squashfs: `PATH` only, and `/bin/sh`.

use std::collections::BTreeMap;

use berth_squashfs::Image;

use crate::image_config::RunConfig;

/// The `PATH` of an image that sets none (Apptainer's default).
pub const DEFAULT_PATH: &str = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// What runs before an Apptainer image's command: its environment scripts
/// sourced in name order, then the command.
pub const SINGULARITY_ENV_SCRIPT: &str =
    "for f in /.singularity.d/env/*.sh; do if [ -f \"$f\" ]; then . \"$f\"; fi; done; exec \"$@\"";

/// The largest settings file read (labels, environment).
const MAX_SETTINGS: u64 = 1 << 20;

/// The run settings of `image` (see the module's description).
pub fn run_config(image: &Image) -> berth_squashfs::reader::Result<RunConfig> {
    let dir_exists = |p: &str| -> berth_squashfs::reader::Result<bool> {
        Ok(image.read_dir_names(p)?.is_some())
    };
    if dir_exists("/.singularity.d")? {
        let labels = image
            .read_path("/.singularity.d/labels.json", MAX_SETTINGS)?
            .map(|b| parse_labels(&b))
            .unwrap_or_default();
        let has_runscript = image.resolve("/.singularity.d/runscript")?.is_some();
        return Ok(RunConfig {
            env: vec![DEFAULT_PATH.to_string()],
            entrypoint: vec![
                "/bin/sh".into(),
                "-c".into(),
                SINGULARITY_ENV_SCRIPT.into(),
                "/.singularity.d/actions/exec".into(),
            ],
            cmd: vec![if has_runscript {
                "/.singularity.d/runscript".into()
            } else {
                "/bin/sh".into()
            }],
            labels,
            ..RunConfig::default()
        });
    }
    if image.resolve("/etc/rc")?.is_some() {
        let mut env = image
            .read_path("/etc/environment", MAX_SETTINGS)?
            .map(|b| parse_environment(&b))
            .unwrap_or_default();
        if !env.iter().any(|e| e.starts_with("PATH=")) {
            env.insert(0, DEFAULT_PATH.to_string());
        }
        return Ok(RunConfig {
            env,
            entrypoint: vec!["/bin/sh".into(), "/etc/rc".into()],
            ..RunConfig::default()
        });
    }
    Ok(RunConfig {
        env: vec![DEFAULT_PATH.to_string()],
        cmd: vec!["/bin/sh".into()],
        ..RunConfig::default()
    })
}

/// `labels.json`: an object of strings (other values kept as JSON text);
/// anything else gives no labels.
fn parse_labels(bytes: &[u8]) -> BTreeMap<String, String> {
    match serde_json::from_slice::<BTreeMap<String, serde_json::Value>>(bytes) {
        Ok(map) => map
            .into_iter()
            .map(|(k, v)| match v {
                serde_json::Value::String(s) => (k, s),
                other => (k, other.to_string()),
            })
            .collect(),
        Err(_) => BTreeMap::new(),
    }
}

/// `/etc/environment` as enroot writes it: `KEY=VALUE` lines, one pair of
/// surrounding quotes taken off, comments and lines without a valid name
/// skipped.
fn parse_environment(bytes: &[u8]) -> Vec<String> {
    String::from_utf8_lossy(bytes)
        .lines()
        .filter_map(|line| {
            let line = line.trim();
            let line = line.strip_prefix("export ").unwrap_or(line);
            let (k, v) = line.split_once('=')?;
            let valid = !k.is_empty()
                && !k.starts_with(|c: char| c.is_ascii_digit())
                && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
            if !valid {
                return None;
            }
            let v = ['"', '\'']
                .iter()
                .find_map(|q| v.strip_prefix(*q).and_then(|s| s.strip_suffix(*q)))
                .unwrap_or(v);
            Some(format!("{k}={v}"))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn enroot_environment_lines() {
        let env = parse_environment(
            b"PATH=/opt/bin:/usr/bin\n# comment\nCUDA_VERSION=\"11.8.0\"\nexport A='b c'\n1X=no\nbad line\nEMPTY=\n",
        );
        assert_eq!(
            env,
            [
                "PATH=/opt/bin:/usr/bin",
                "CUDA_VERSION=11.8.0",
                "A=b c",
                "EMPTY="
            ]
        );
    }

    #[test]
    fn labels_are_strings() {
        let l = parse_labels(br#"{"a": "b", "n": 3}"#);
        assert_eq!(l["a"], "b");
        assert_eq!(l["n"], "3");
        assert!(parse_labels(b"[1]").is_empty());
    }
}
