//! The reference grammar of the distribution project
//! (`distribution/reference`), checked by hand: `[DOMAIN/]PATH[:TAG][@DIGEST]`.
//!
//! oci-spec parses references with one regular expression whose tag part,
//! `[\w][\w.-]{0,127}`, is Unicode-aware in Rust's `regex`: compiling it
//! took about 60 ms of every `berth pull` (75% of a pull of an image the
//! store has, which the Slurm plugin does for every srun). Docker's `\w` is
//! ASCII, so this parser is also the stricter one.

use oci_spec::distribution::Reference;

/// A repository path's longest length (the distribution project's).
const NAME_MAX: usize = 255;

/// Parses `text`; the error says what part is wrong.
pub fn parse(text: &str) -> Result<Reference, String> {
    if text.is_empty() {
        return Err("empty".into());
    }
    let (rest, digest) = match text.split_once('@') {
        Some((r, d)) => (r, Some(digest(d)?)),
        None => (text, None),
    };
    // A tag follows the last ':' after the last '/' (a ':' before it is a
    // registry's port).
    let last_slash = rest.rfind('/').map_or(0, |i| i + 1);
    let (name, tag) = match rest[last_slash..].rfind(':') {
        Some(i) => (
            &rest[..last_slash + i],
            Some(tag(&rest[last_slash + i + 1..])?),
        ),
        None => (rest, None),
    };
    let (registry, repository) = split_domain(name)?;
    if repository.len() > NAME_MAX {
        return Err(format!(
            "the repository name is longer than {NAME_MAX} characters"
        ));
    }
    Ok(match (tag, digest) {
        (Some(t), Some(d)) => Reference::with_tag_and_digest(registry, repository, t, d),
        (None, Some(d)) => Reference::with_digest(registry, repository, d),
        (t, None) => {
            Reference::with_tag(registry, repository, t.unwrap_or_else(|| "latest".into()))
        }
    })
}

/// `[DOMAIN/]PATH` as registry and repository, Docker's way: the first
/// component is a registry when it has a `.` or `:` or is `localhost`
/// (`index.docker.io` is `docker.io`), and an official Docker Hub image
/// is under `library/`.
fn split_domain(name: &str) -> Result<(String, String), String> {
    let (domain, path) = match name.split_once('/') {
        Some((first, rest)) if first.contains(['.', ':']) || first == "localhost" => {
            check_domain(first)?;
            (first, rest)
        }
        _ => ("docker.io", name),
    };
    for component in path.split('/') {
        check_path_component(component)?;
    }
    let domain = if domain == "index.docker.io" {
        "docker.io"
    } else {
        domain
    };
    let path = if domain == "docker.io" && !path.contains('/') {
        format!("library/{path}")
    } else {
        path.to_string()
    };
    Ok((domain.to_string(), path))
}

/// `host[:port]`: dot-separated components of letters, digits and inner
/// dashes, and a decimal port.
fn check_domain(domain: &str) -> Result<(), String> {
    let (host, port) = match domain.split_once(':') {
        Some((h, p)) => (h, Some(p)),
        None => (domain, None),
    };
    let component_ok = |c: &str| {
        !c.is_empty()
            && c.chars().all(|ch| ch.is_ascii_alphanumeric() || ch == '-')
            && !c.starts_with('-')
            && !c.ends_with('-')
    };
    if !host.split('.').all(component_ok) {
        return Err(format!(
            "{domain:?} is not a registry host (letters, digits, '-' and '.')"
        ));
    }
    if let Some(p) = port {
        if p.is_empty() || !p.chars().all(|c| c.is_ascii_digit()) {
            return Err(format!("{domain:?}: the port must be a number"));
        }
    }
    Ok(())
}

/// A path component: lower-case letters and digits, separated by one `.`,
/// one or two `_`, or any number of `-`.
fn check_path_component(c: &str) -> Result<(), String> {
    let bad = || {
        if c.chars().any(|ch| ch.is_ascii_uppercase()) {
            "repository names must be lower case".to_string()
        } else {
            format!(
                "{c:?} is not a repository path component (lower-case letters and digits, separated by '.', '_', '__' or dashes)"
            )
        }
    };
    let b = c.as_bytes();
    let alnum = |x: u8| x.is_ascii_lowercase() || x.is_ascii_digit();
    if b.is_empty() || !alnum(b[0]) || !alnum(b[b.len() - 1]) {
        return Err(bad());
    }
    let mut i = 0;
    while i < b.len() {
        if alnum(b[i]) {
            i += 1;
            continue;
        }
        let start = i;
        while i < b.len() && !alnum(b[i]) {
            i += 1;
        }
        let sep = &c[start..i];
        let ok = sep == "." || sep == "_" || sep == "__" || sep.bytes().all(|x| x == b'-');
        if !ok {
            return Err(bad());
        }
    }
    Ok(())
}

/// A tag: a letter, digit or `_`, then up to 127 of those, `.` and `-`.
fn tag(t: &str) -> Result<String, String> {
    let word = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let ok = t.len() <= 128
        && t.chars().next().is_some_and(word)
        && t.chars().all(|c| word(c) || c == '.' || c == '-');
    if ok {
        Ok(t.to_string())
    } else {
        Err(format!(
            "tag {t:?}: up to 128 letters, digits, '_', '.' and '-', not starting with '.' or '-'"
        ))
    }
}

/// A digest: `ALGORITHM:HEX`, of sha256, sha384 or sha512 with its length.
fn digest(d: &str) -> Result<String, String> {
    let (algo, hex) = d
        .split_once(':')
        .ok_or_else(|| format!("digest {d:?}: expected ALGORITHM:HEX"))?;
    let want = match algo {
        "sha256" => 64,
        "sha384" => 96,
        "sha512" => 128,
        other => {
            return Err(format!(
                "digest algorithm {other:?} is not supported (sha256, sha384, sha512)"
            ))
        }
    };
    if hex.len() != want || !hex.chars().all(|c| c.is_ascii_hexdigit()) {
        return Err(format!("digest {d:?}: {algo} takes {want} hex digits"));
    }
    Ok(d.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The same acceptance and the same parts as oci-spec's regular
    /// expression, on references of every shape (and stricter on
    /// non-ASCII tags, where Docker's grammar is ASCII).
    #[test]
    fn agrees_with_oci_spec() {
        let d64 = "a".repeat(64);
        let cases = [
            "debian".to_string(),
            "debian:12".into(),
            "library/debian".into(),
            "user/app:v1.2-rc_3".into(),
            "docker.io/debian".into(),
            "index.docker.io/user/app".into(),
            "localhost/x".into(),
            "localhost:5000/a/b:t".into(),
            "127.0.0.1:5000/berth-test/layers".into(),
            "quay.io/org/img:v1.2".into(),
            "reg-1.example.com:443/a.b/c__d/e---f:TAG".into(),
            format!("x@sha256:{d64}"),
            format!("x:1@sha256:{d64}"),
            format!("reg:5000/x@sha512:{}", "b".repeat(128)),
            "a//b".into(),
            "x:".into(),
            ":tag".into(),
            "x:tag with space".into(),
            "-x".into(),
            "x-".into(),
            "a_b".into(),
            "a___b".into(),
            "a..b".into(),
            "x@sha256:abc".into(),
            "x@md5:0123".into(),
            "reg:port/x".into(),
            "-reg.io/x".into(),
            "x:.tag".into(),
            format!("x:{}", "t".repeat(128)),
            format!("x:{}", "t".repeat(129)),
            "foo.bar".into(),
            "foo.bar/baz".into(),
        ];
        for text in cases {
            let ours = parse(&text);
            let theirs = Reference::try_from(text.as_str());
            match (&ours, &theirs) {
                (Ok(a), Ok(b)) => assert_eq!(
                    (a.registry(), a.repository(), a.tag(), a.digest()),
                    (b.registry(), b.repository(), b.tag(), b.digest()),
                    "{text}"
                ),
                (Err(_), Err(_)) => {}
                _ => panic!("{text:?}: ours {ours:?}, oci-spec's {theirs:?}"),
            }
        }
        // Docker's \\w is ASCII.
        assert!(parse("x:tög").is_err());
    }
}
