//! Docker's credential helpers, named by an auth file: `credHelpers`
//! (`{"registry": "NAME"}`) and `credsStore` (`"NAME"`, for every
//! registry). `docker-credential-NAME get` (on PATH) reads the server's
//! address on stdin and answers `{"ServerURL", "Username", "Secret"}` on
//! stdout, or says "credentials not found" (the docker-credential-helpers
//! protocol; ECR's, GCR's and ACR's helpers speak it). The secret is
//! never logged.

use std::collections::BTreeMap;
use std::io::Write;
use std::process::{Command, Stdio};

use serde::Deserialize;

use super::Credentials;
use crate::error::{Error, Result};

/// The helper `credHelpers` names for `registry` (normalised, as the
/// file's keys are).
pub(super) fn per_registry(
    rest: &BTreeMap<String, serde_json::Value>,
    registry: &str,
    normalize: fn(&str) -> String,
) -> Option<String> {
    rest.get("credHelpers")?
        .as_object()?
        .iter()
        .find(|(k, _)| normalize(k) == registry)
        .and_then(|(_, v)| v.as_str().map(str::to_string))
}

/// The helper `credsStore` names.
pub(super) fn store(rest: &BTreeMap<String, serde_json::Value>) -> Option<String> {
    rest.get("credsStore")?
        .as_str()
        .filter(|s| !s.is_empty())
        .map(str::to_string)
}

#[derive(Deserialize)]
struct Answer {
    #[serde(rename = "Username", default)]
    username: String,
    #[serde(rename = "Secret", default)]
    secret: String,
}

/// Asks helper `name` for `registry`'s credentials.
pub(super) fn get(name: &str, registry: &str) -> Result<Option<Credentials>> {
    let auth = |detail: String| Error::Auth {
        registry: registry.to_string(),
        detail,
    };
    let program = format!("docker-credential-{name}");
    if name.is_empty()
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        || name.starts_with('.')
    {
        return Err(auth(format!(
            "the credential helper name {name:?} is not a plain program name"
        )));
    }
    // Docker Hub's address, as docker asks for it.
    let server = if registry == "docker.io" {
        "https://index.docker.io/v1/"
    } else {
        registry
    };
    let mut child = Command::new(&program)
        .arg("get")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| {
            auth(format!(
                "cannot run the credential helper {program} ({e}); install it on PATH, \
                 or remove credHelpers/credsStore from your auth file"
            ))
        })?;
    if let Some(mut stdin) = child.stdin.take() {
        let _ = stdin.write_all(server.as_bytes());
    }
    let out = child
        .wait_with_output()
        .map_err(|e| auth(format!("{program}: {e}")))?;
    let said = |b: &[u8]| String::from_utf8_lossy(b).trim().to_string();
    if !out.status.success() {
        let msg = format!("{} {}", said(&out.stdout), said(&out.stderr));
        if msg.to_ascii_lowercase().contains("credentials not found") {
            return Ok(None);
        }
        return Err(auth(format!(
            "the credential helper {program} failed ({}): {}",
            out.status,
            msg.trim()
        )));
    }
    let answer: Answer = serde_json::from_slice(&out.stdout).map_err(|e| {
        auth(format!(
            "the credential helper {program} did not answer with JSON credentials: {e}"
        ))
    })?;
    Ok(Some(Credentials {
        username: answer.username,
        password: answer.secret,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rest(json: &str) -> BTreeMap<String, serde_json::Value> {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn helpers_by_registry_and_for_all() {
        let r = rest(
            r#"{"credHelpers": {"https://index.docker.io/v1/": "hub", "r.io": "ecr-login"}, "credsStore": "pass"}"#,
        );
        let norm = super::super::normalize_key;
        assert_eq!(per_registry(&r, "docker.io", norm).as_deref(), Some("hub"));
        assert_eq!(per_registry(&r, "r.io", norm).as_deref(), Some("ecr-login"));
        assert_eq!(per_registry(&r, "x.io", norm), None);
        assert_eq!(store(&r).as_deref(), Some("pass"));
        assert_eq!(store(&rest(r#"{"credsStore": ""}"#)), None);
    }

    #[test]
    fn a_helper_name_is_a_plain_program_name() {
        for bad in ["", "../x", "a/b", ".hidden", "a b"] {
            let e = get(bad, "r.io").unwrap_err();
            assert!(
                e.to_string().contains("not a plain program name"),
                "{bad}: {e}"
            );
        }
        let e = get("berth-no-such-helper", "r.io").unwrap_err();
        assert!(
            e.to_string().contains("cannot run the credential helper"),
            "{e}"
        );
    }
}
