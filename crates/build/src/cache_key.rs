//! Build-cache keys: sha256 (hex) of NUL-separated parts. A stage starts
//! from the key of its base; each file-system step's key is its parent's
//! key and the step's own digest, so a change anywhere above a step changes
//! its key.
//!
//! The bytes hashed must not change between berth versions without need:
//! every changed key is a cache miss for every user once. The step
//! descriptions below serialise their fields in alphabetical order, as the
//! untyped JSON objects of earlier versions did.

use serde::Serialize;
use sha2::{Digest, Sha256};

use crate::context::hex;

/// sha256 (hex) of `parts`, each followed by a NUL.
pub fn of(parts: &[&str]) -> String {
    let mut h = Sha256::new();
    for p in parts {
        h.update(p.as_bytes());
        h.update([0]);
    }
    hex(&h.finalize())
}

/// The key a `FROM scratch` stage starts from.
pub fn scratch() -> String {
    of(&["scratch"])
}

/// The key a stage on the stored image `id` starts from.
pub fn image(id: &str) -> String {
    of(&["image", id])
}

/// The key of the one-layer flattening of the base image `id` (for bases
/// whose layers the store does not keep).
pub fn flattened_base(id: &str) -> String {
    of(&["flatten", id])
}

/// The key of a step: its parent's key and the step's digest.
pub fn chain(parent: &str, step: &str) -> String {
    of(&[parent, step])
}

/// The digest of `WORKDIR path`.
pub fn workdir(path: &str) -> String {
    of(&["WORKDIR", path])
}

/// What a RUN step's digest covers: the command, its environment, its
/// working directory and user.
#[derive(Serialize)]
pub struct RunStep<'a> {
    /// Environment (ENV, then ARGs, then the default PATH).
    pub env: &'a [(String, String)],
    /// The command line.
    pub run: &'a [String],
    /// `USER`.
    pub user: &'a str,
    /// `WORKDIR`.
    pub workdir: &'a str,
}

impl RunStep<'_> {
    /// The step's digest.
    pub fn digest(&self) -> String {
        of(&["RUN", &serde_json::to_string(self).unwrap_or_default()])
    }
}

/// What a COPY or ADD step's digest covers: its options, sources and
/// destination, and the sources' content (their hash, or the source
/// stage's key).
#[derive(Serialize)]
pub struct CopyStep<'a> {
    /// ADD rather than COPY.
    pub add: bool,
    /// `--chmod`.
    pub chmod: Option<u32>,
    /// `--chown`.
    pub chown: Option<&'a str>,
    /// The sources' content: their hash, or the source stage's key.
    pub content: &'a str,
    /// The destination.
    pub dest: &'a str,
    /// The sources as written (expanded).
    pub sources: &'a [String],
}

impl CopyStep<'_> {
    /// The step's digest.
    pub fn digest(&self) -> String {
        of(&["COPY", &serde_json::to_string(self).unwrap_or_default()])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The descriptions hash as the untyped JSON of earlier versions did:
    /// existing build caches keep their hits.
    #[test]
    fn step_descriptions_are_the_json_earlier_versions_hashed() {
        let env = vec![("PATH".to_string(), "/bin".to_string())];
        let argv = vec!["/bin/sh".to_string(), "-c".to_string(), "true".to_string()];
        let run = RunStep {
            env: &env,
            run: &argv,
            user: "",
            workdir: "/",
        };
        let old = serde_json::json!({"run": argv, "env": env, "workdir": "/", "user": ""});
        assert_eq!(
            run.digest(),
            of(&["RUN", &serde_json::to_string(&old).unwrap()])
        );
        let sources = vec!["a".to_string()];
        let copy = CopyStep {
            add: false,
            chmod: Some(0o755),
            chown: None,
            content: "abc",
            dest: "/d/",
            sources: &sources,
        };
        let old = serde_json::json!({
            "add": false, "sources": sources, "dest": "/d/", "chown": null, "chmod": 0o755, "content": "abc"
        });
        assert_eq!(
            copy.digest(),
            of(&["COPY", &serde_json::to_string(&old).unwrap()])
        );
    }

    #[test]
    fn keys_are_sha256_of_nul_terminated_parts() {
        // printf 'scratch\0' | sha256sum
        assert_eq!(
            scratch(),
            "d1c4352354cd8d12c4709c9fb132018669135d69fb8a82f10bb869822add48f7"
        );
        // printf 'image\0sha256:x\0' | sha256sum
        assert_eq!(
            image("sha256:x"),
            "7b1bfb38a3ab21c388b8c006cc4dc3bad12aec6f2255ad9f75a342109fd6b706"
        );
        assert_ne!(chain(&scratch(), "x"), chain(&scratch(), "y"));
    }
}
