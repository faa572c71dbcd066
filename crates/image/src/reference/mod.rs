//! Image references (`[registry[:port]/]repository[:tag][@digest]`), following
//! the Docker grammar: a bare name means `docker.io/library/NAME:latest`; the
//! first component is a registry when it has a `.` or a `:` or is `localhost`.
//! The forms enroot and Pyxis users write are taken too (see [`canonical`]):
//! `[USER@][REGISTRY#]IMAGE[:TAG|@DIGEST]` and `docker://REF`.

use std::borrow::Cow;
use std::fmt;

use oci_spec::distribution::Reference;

use crate::error::{Error, Result};

mod grammar;

/// A parsed, normalised image reference.
#[derive(Debug, Clone)]
pub struct ImageRef {
    inner: Reference,
    /// Typed without a registry (`ubuntu:24.04`): the registries
    /// configuration's aliases and search list may resolve it.
    short: bool,
}

/// Two references are equal when they name the same image, however typed.
impl PartialEq for ImageRef {
    fn eq(&self, other: &Self) -> bool {
        self.inner == other.inner
    }
}

impl Eq for ImageRef {}

impl ImageRef {
    /// Parses a reference typed by a user.
    pub fn parse(text: &str) -> Result<Self> {
        let invalid = |reason: String| Error::Reference {
            reference: text.to_string(),
            reason,
        };
        let text: &str = &canonical(text).map_err(invalid)?;
        if text.trim() != text || text.is_empty() {
            return Err(invalid("empty, or surrounded by white space".to_string()));
        }
        let lower_case = |repository: &str| {
            if repository.chars().any(|c| c.is_ascii_uppercase()) {
                // Upper case is allowed in tags and a registry host, not in
                // repository paths; say so instead of the regexp's message.
                Err(invalid("repository names must be lower case".to_string()))
            } else {
                Ok(())
            }
        };
        if !names_registry(text) {
            // The whole name is the repository (found by fuzzing: "oSt/x"
            // parsed as docker.io/oSt/x, which does not parse again).
            let name = text.split(['@', ':']).next().unwrap_or(text);
            lower_case(name)?;
        }
        let inner = grammar::parse(text).map_err(invalid)?;
        lower_case(inner.repository())?;
        Ok(Self {
            inner,
            short: !names_registry(text),
        })
    }

    /// Parses a local image name given to `berth import`: a name without a
    /// registry lands under `localhost/` (as podman does), tag `latest`.
    pub fn parse_local_name(text: &str) -> Result<Self> {
        if names_registry(text) {
            Self::parse(text)
        } else {
            Self::parse(&format!("localhost/{text}"))
        }
    }

    /// Whether it was typed without a registry.
    pub fn is_short(&self) -> bool {
        self.short
    }

    /// The registry host as written (`docker.io` for Docker Hub).
    pub fn registry(&self) -> &str {
        self.inner.registry()
    }

    /// The registry host to contact (`index.docker.io` for Docker Hub).
    pub fn resolve_registry(&self) -> &str {
        self.inner.resolve_registry()
    }

    /// The repository path, e.g. `library/debian`.
    pub fn repository(&self) -> &str {
        self.inner.repository()
    }

    /// The tag, if any (`latest` when neither tag nor digest was given).
    pub fn tag(&self) -> Option<&str> {
        self.inner.tag()
    }

    /// The digest, if the reference pins one.
    pub fn digest(&self) -> Option<&str> {
        self.inner.digest()
    }

    /// The name the store records for this reference: `registry/repo:tag`,
    /// or `registry/repo@digest` when only a digest was given.
    pub fn store_name(&self) -> String {
        match (self.tag(), self.digest()) {
            (Some(tag), _) => format!("{}/{}:{}", self.registry(), self.repository(), tag),
            (None, Some(d)) => format!("{}/{}@{}", self.registry(), self.repository(), d),
            (None, None) => format!("{}/{}:latest", self.registry(), self.repository()),
        }
    }

    /// The same repository pinned to `digest`.
    pub fn with_digest(&self, digest: &str) -> Self {
        Self {
            inner: Reference::with_digest(
                self.registry().to_string(),
                self.repository().to_string(),
                digest.to_string(),
            ),
            short: false,
        }
    }

    /// The underlying `oci-spec` reference, for the registry client.
    pub fn as_oci(&self) -> &Reference {
        &self.inner
    }
}

/// `text` in Docker's grammar: enroot's `[USER@][REGISTRY#]IMAGE` becomes
/// `REGISTRY/IMAGE` (`nvcr.io#nvidia/pytorch:24.01-py3` is
/// `nvcr.io/nvidia/pytorch:24.01-py3`; `USER@` is dropped: credentials come
/// from `berth login`), and a `docker://` prefix is taken off. Anything else
/// is returned as it is.
pub fn canonical(text: &str) -> std::result::Result<Cow<'_, str>, String> {
    let text = text.strip_prefix("docker://").unwrap_or(text);
    let Some((left, image)) = text.split_once('#') else {
        return Ok(Cow::Borrowed(text));
    };
    // The user part ends at the last '@' before the '#'.
    let registry = left.rsplit_once('@').map_or(left, |(_, r)| r);
    if registry.is_empty() || image.is_empty() || image.contains('#') {
        return Err(format!(
            "enroot's form is [USER@][REGISTRY#]IMAGE[:TAG], as in nvcr.io#nvidia/pytorch:24.01-py3; {text:?} is not"
        ));
    }
    Ok(Cow::Owned(format!("{registry}/{image}")))
}

/// Whether `text` is an image id or an id's prefix (`sha256:...`, or 12 or
/// more lowercase hex digits) rather than a name: such a text is looked up
/// in the store and never pulled.
pub fn looks_like_id(text: &str) -> bool {
    let hex = text.strip_prefix("sha256:").unwrap_or(text);
    text.starts_with("sha256:")
        || (hex.len() >= 12
            && hex
                .chars()
                .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase()))
}

/// Whether a reference's first component names a registry (Docker's rule:
/// it holds a `.` or a `:` or is `localhost`, and more components follow).
pub fn names_registry(text: &str) -> bool {
    let first = text.split('/').next().unwrap_or_default();
    text.contains('/') && (first.contains('.') || first.contains(':') || first == "localhost")
}

impl fmt::Display for ImageRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(s: &str) -> String {
        ImageRef::parse(s).unwrap().store_name()
    }

    #[test]
    fn enroot_and_docker_uri_forms() {
        assert_eq!(
            name("nvcr.io#nvidia/pytorch:24.01-py3"),
            "nvcr.io/nvidia/pytorch:24.01-py3"
        );
        assert_eq!(
            name("alice@gitlab.example.com:5005#grp/app"),
            "gitlab.example.com:5005/grp/app:latest"
        );
        assert_eq!(
            name("docker://ubuntu:24.04"),
            "docker.io/library/ubuntu:24.04"
        );
        assert_eq!(
            name("docker://nvcr.io#nvidia/cuda"),
            "nvcr.io/nvidia/cuda:latest"
        );
        for bad in ["#x", "reg#", "a#b#c", "u@#x"] {
            let e = ImageRef::parse(bad).unwrap_err().to_string();
            assert!(e.contains("enroot's form"), "{bad}: {e}");
        }
        assert_eq!(canonical("ubuntu").unwrap(), "ubuntu");
    }

    #[test]
    fn docker_defaults() {
        assert_eq!(name("debian"), "docker.io/library/debian:latest");
        assert_eq!(name("debian:12"), "docker.io/library/debian:12");
        assert_eq!(name("user/app"), "docker.io/user/app:latest");
        assert_eq!(name("docker.io/debian"), "docker.io/library/debian:latest");
        assert_eq!(
            ImageRef::parse("debian").unwrap().resolve_registry(),
            "index.docker.io"
        );
    }

    #[test]
    fn registries_ports_localhost() {
        assert_eq!(name("localhost/x"), "localhost/x:latest");
        assert_eq!(name("localhost:5000/a/b:t"), "localhost:5000/a/b:t");
        assert_eq!(
            name("127.0.0.1:5000/berth-test/layers"),
            "127.0.0.1:5000/berth-test/layers:latest"
        );
        assert_eq!(name("quay.io/org/img:v1.2"), "quay.io/org/img:v1.2");
        let r = ImageRef::parse("ghcr.io/o/i:v1").unwrap();
        assert_eq!(
            (r.registry(), r.repository(), r.tag()),
            ("ghcr.io", "o/i", Some("v1"))
        );
    }

    /// Found by the `reference` fuzz target: an upper-case first component
    /// that is no registry parsed as `docker.io/oSt/x`, which did not parse
    /// again. Every reference that parses prints as one that does.
    #[test]
    fn fuzz_upper_case_first_component_is_refused() {
        for bad in ["oSt/x", "Debian", "library/Debian:12"] {
            let e = ImageRef::parse(bad).unwrap_err().to_string();
            assert!(e.contains("lower case"), "{bad}: {e}");
        }
        for bad in ["localhost/Foo", "reg:5000/A/b"] {
            assert!(ImageRef::parse(bad).is_err(), "{bad}");
        }
        for ok in ["reg:5000/a/b:TAG", "debian:Bookworm", "Reg.Example.com/a"] {
            let r = ImageRef::parse(ok).unwrap();
            assert_eq!(ImageRef::parse(&r.to_string()).unwrap(), r, "{ok}");
        }
    }

    #[test]
    fn digests() {
        let d = format!("sha256:{}", "a".repeat(64));
        let r = ImageRef::parse(&format!("reg:5000/x@{d}")).unwrap();
        assert_eq!(r.digest(), Some(d.as_str()));
        assert_eq!(r.tag(), None);
        assert_eq!(r.store_name(), format!("reg:5000/x@{d}"));
        let r = ImageRef::parse(&format!("x:1@{d}")).unwrap();
        assert_eq!((r.tag(), r.digest()), (Some("1"), Some(d.as_str())));
    }

    #[test]
    fn rejects() {
        for bad in [
            "",
            " debian",
            "Debian/Foo",
            "x@sha256:abc",
            "x@md5:0123",
            "a//b",
            "x:",
            ":tag",
            "x:tag with space",
            "-x",
        ] {
            let err = ImageRef::parse(bad);
            assert!(err.is_err(), "{bad:?} accepted: {err:?}");
        }
    }

    #[test]
    fn local_names() {
        let n = |s: &str| ImageRef::parse_local_name(s).unwrap().store_name();
        assert_eq!(n("myimg"), "localhost/myimg:latest");
        assert_eq!(n("me/myimg:v2"), "localhost/me/myimg:v2");
        assert_eq!(n("reg.example.org/a:1"), "reg.example.org/a:1");
    }

    proptest::proptest! {
        #[test]
        fn parse_never_panics(s in "\\PC{0,80}") {
            let _ = ImageRef::parse(&s);
            let _ = ImageRef::parse_local_name(&s);
        }

        #[test]
        fn roundtrip(reg in "(localhost|[a-z]{1,8}\\.[a-z]{2,3})(:[0-9]{2,5})?",
                     repo in "[a-z0-9]{1,10}(/[a-z0-9]{1,10}){0,2}",
                     tag in "[A-Za-z0-9_][A-Za-z0-9_.-]{0,20}") {
            let text = format!("{reg}/{repo}:{tag}");
            let r = ImageRef::parse(&text).unwrap();
            proptest::prop_assert_eq!(r.store_name(), text.clone());
            proptest::prop_assert_eq!(ImageRef::parse(&r.store_name()).unwrap(), r);
        }
    }
}
