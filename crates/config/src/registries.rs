//! The system's registries configuration, containers-registries.conf(5)
//! version 2 as podman, skopeo and buildah read it, so that a site's
//! rewrites, mirrors and blocks apply to berth too: `[[registry]]` tables
//! (`prefix`, `location`, `insecure`, `blocked`, `[[registry.mirror]]`
//! with `location` and `insecure`, `pull-from-mirror` = `all`,
//! `digest-only` or `tag-only`). Read from `CONTAINERS_REGISTRIES_CONF`
//! when set, else /etc/containers/registries.conf and then
//! /etc/containers/registries.conf.d/*.conf in name order (a later table
//! with the same prefix replaces an earlier one). A short name (no
//! registry) is its `[aliases]` entry, else looked for in each of
//! `unqualified-search-registries` in order (podman's permissive mode);
//! with neither, Docker Hub.

use std::path::{Path, PathBuf};

use serde::Deserialize;

/// One file's tables (other keys are ignored).
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
struct File {
    #[serde(default)]
    registry: Vec<Entry>,
    /// Registries a short name is looked for in, in order.
    unqualified_search_registries: Option<Vec<String>>,
    /// Short names to full ones.
    #[serde(default)]
    aliases: std::collections::BTreeMap<String, String>,
}

/// A `[[registry]]` table.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub struct Entry {
    /// What references it applies to (`host[/path]`, or `*.domain`);
    /// `location` when missing.
    #[serde(default)]
    pub prefix: String,
    /// Where those references are pulled from instead.
    #[serde(default)]
    pub location: String,
    /// Plain HTTP and no certificate checks.
    #[serde(default)]
    pub insecure: bool,
    /// Never pulled.
    #[serde(default)]
    pub blocked: bool,
    /// Tried before `location`, in order.
    #[serde(default)]
    pub mirror: Vec<Mirror>,
    /// Which references the mirrors serve.
    #[serde(default)]
    pub pull_from_mirror: PullFromMirror,
}

/// A `[[registry.mirror]]` table.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
pub struct Mirror {
    /// The mirror's `host[/path]`.
    pub location: String,
    /// Plain HTTP and no certificate checks.
    #[serde(default)]
    pub insecure: bool,
}

/// `pull-from-mirror`.
#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum PullFromMirror {
    /// Every reference.
    #[default]
    All,
    /// References by digest only (a tag on a mirror may be stale).
    DigestOnly,
    /// References by tag only.
    TagOnly,
}

/// The registries configuration that applies.
#[derive(Debug, Clone, Default)]
pub struct Registries {
    /// The tables, later files' last.
    pub entries: Vec<Entry>,
    /// The files read.
    pub files: Vec<PathBuf>,
    /// `unqualified-search-registries` (the last file's that sets it).
    pub search: Vec<String>,
    /// `[aliases]`: short names to full ones (a later file's wins).
    pub aliases: std::collections::BTreeMap<String, String>,
}

/// Where a reference is pulled from, in order: mirrors, then the primary.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Source {
    /// The reference there (`host/path/repo:tag` or `@digest`).
    pub reference: String,
    /// Plain HTTP allowed.
    pub insecure: bool,
    /// A mirror (the primary is last).
    pub mirror: bool,
}

/// Why a reference cannot be pulled.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{reference} is blocked by the registries configuration ({file}: prefix {prefix:?})")]
pub struct Blocked {
    /// The reference.
    pub reference: String,
    /// The table's prefix.
    pub prefix: String,
    /// The file(s) read.
    pub file: String,
}

impl Registries {
    /// The system's configuration; files that cannot be read or parsed are
    /// skipped with a warning (podman refuses them; a broken site file
    /// must not stop every pull), none at all is empty.
    pub fn load() -> Self {
        let files: Vec<PathBuf> = match std::env::var_os("CONTAINERS_REGISTRIES_CONF") {
            Some(f) if !f.is_empty() => vec![PathBuf::from(f)],
            _ => {
                let mut files = vec![PathBuf::from("/etc/containers/registries.conf")];
                let mut drop_ins: Vec<PathBuf> =
                    std::fs::read_dir("/etc/containers/registries.conf.d")
                        .into_iter()
                        .flatten()
                        .flatten()
                        .map(|e| e.path())
                        .filter(|p| p.extension().is_some_and(|x| x == "conf"))
                        .collect();
                drop_ins.sort();
                files.extend(drop_ins);
                files
            }
        };
        let mut out = Registries::default();
        for f in files {
            match read(&f) {
                Ok(Some(file)) => {
                    out.add(file.registry);
                    if let Some(search) = file.unqualified_search_registries {
                        out.search = search;
                    }
                    out.aliases.extend(file.aliases);
                    out.files.push(f);
                }
                Ok(None) => {}
                Err(e) => eprintln!(
                    "berth: warning: {}: {e}; its [[registry]] tables are ignored",
                    f.display()
                ),
            }
        }
        out
    }

    /// The full references a short name (`name`, without its tag or
    /// digest `pin`) may stand for, in order: its alias, else each search
    /// registry (Docker Hub's official images under `library/`); empty when
    /// neither is configured.
    pub fn short_name_candidates(&self, name: &str, pin: &str) -> Vec<String> {
        if let Some(full) = self.aliases.get(name) {
            return vec![format!("{full}{pin}")];
        }
        self.search
            .iter()
            .map(|reg| {
                if reg == "docker.io" && !name.contains('/') {
                    format!("docker.io/library/{name}{pin}")
                } else {
                    format!("{reg}/{name}{pin}")
                }
            })
            .collect()
    }

    /// Adds a file's tables: one with a prefix already known replaces it.
    fn add(&mut self, entries: Vec<Entry>) {
        for mut e in entries {
            if e.prefix.is_empty() {
                e.prefix = e.location.clone();
            }
            if e.prefix.is_empty() {
                continue;
            }
            self.entries.retain(|x| x.prefix != e.prefix);
            self.entries.push(e);
        }
    }

    /// Where `reference` (fully qualified: `host[:port]/path[:tag|@digest]`)
    /// is pulled from: the mirrors its table allows, then the primary (its
    /// `location`, or the reference itself).
    pub fn sources(&self, reference: &str) -> Result<Vec<Source>, Blocked> {
        let by_digest = reference.contains('@');
        let Some((entry, rest)) = self.best(reference) else {
            return Ok(vec![Source {
                reference: reference.to_string(),
                insecure: false,
                mirror: false,
            }]);
        };
        if entry.blocked {
            return Err(Blocked {
                reference: reference.to_string(),
                prefix: entry.prefix.clone(),
                file: self
                    .files
                    .iter()
                    .map(|f| f.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", "),
            });
        }
        let mirrors_apply = match entry.pull_from_mirror {
            PullFromMirror::All => true,
            PullFromMirror::DigestOnly => by_digest,
            PullFromMirror::TagOnly => !by_digest,
        };
        let mut out: Vec<Source> = Vec::new();
        if mirrors_apply {
            out.extend(entry.mirror.iter().map(|m| Source {
                reference: format!("{}{rest}", m.location),
                insecure: m.insecure,
                mirror: true,
            }));
        }
        let primary = if entry.location.is_empty() || entry.prefix.starts_with("*.") {
            reference.to_string()
        } else {
            format!("{}{rest}", entry.location)
        };
        out.push(Source {
            reference: primary,
            insecure: entry.insecure,
            mirror: false,
        });
        Ok(out)
    }

    /// The table whose prefix matches `reference` longest, and what follows
    /// the prefix.
    fn best<'a>(&'a self, reference: &'a str) -> Option<(&'a Entry, &'a str)> {
        self.entries
            .iter()
            .filter_map(|e| matches(&e.prefix, reference).map(|rest| (e, rest)))
            .max_by_key(|(e, _)| e.prefix.len())
    }
}

/// What follows `prefix` in `reference` when it applies: at a path,
/// tag or digest boundary; `*.domain` for hosts under domain.
fn matches<'a>(prefix: &str, reference: &'a str) -> Option<&'a str> {
    if let Some(domain) = prefix.strip_prefix("*.") {
        let host_end = reference.find('/').unwrap_or(reference.len());
        let host = &reference[..host_end];
        let host_only = host.split(':').next().unwrap_or(host);
        return host_only
            .ends_with(&format!(".{domain}"))
            .then_some(&reference[host_end..]);
    }
    let rest = reference.strip_prefix(prefix)?;
    (rest.is_empty() || rest.starts_with(['/', ':', '@'])).then_some(rest)
}

/// One file; `None` when it does not exist.
fn read(path: &Path) -> Result<Option<File>, String> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e.to_string()),
    };
    toml::from_str(&text).map(Some).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    const CONF: &str = r#"
unqualified-search-registries = ["docker.io"]

[[registry]]
prefix = "docker.io"
location = "docker.io"
[[registry.mirror]]
location = "hub-mirror.site:5000"
insecure = true
[[registry.mirror]]
location = "hub-cache.site"

[[registry]]
prefix = "docker.io/library/busybox"
blocked = true

[[registry]]
prefix = "nvcr.io/nvidia"
location = "ngc-cache.site/nvidia"
pull-from-mirror = "digest-only"
[[registry.mirror]]
location = "ngc-mirror.site/nvidia"

[[registry]]
prefix = "*.internal.site"
insecure = true
"#;

    fn regs() -> Registries {
        let mut r = Registries::default();
        r.add(toml::from_str::<File>(CONF).unwrap().registry);
        r
    }

    fn refs(v: Vec<Source>) -> Vec<(String, bool, bool)> {
        v.into_iter()
            .map(|s| (s.reference, s.insecure, s.mirror))
            .collect()
    }

    #[test]
    fn mirrors_rewrites_blocks_and_wildcards() {
        let r = regs();
        assert_eq!(
            refs(r.sources("docker.io/library/ubuntu:24.04").unwrap()),
            vec![
                (
                    "hub-mirror.site:5000/library/ubuntu:24.04".into(),
                    true,
                    true
                ),
                ("hub-cache.site/library/ubuntu:24.04".into(), false, true),
                ("docker.io/library/ubuntu:24.04".into(), false, false),
            ]
        );
        let e = r.sources("docker.io/library/busybox:1").unwrap_err();
        assert!(e.to_string().contains("blocked"), "{e}");
        // The longest prefix wins; a prefix ends at a boundary.
        assert_eq!(r.sources("docker.io/library/busyboxes").unwrap().len(), 3);
        // digest-only: mirrors for digests only; the location rewrites.
        assert_eq!(
            refs(r.sources("nvcr.io/nvidia/pytorch:24.01-py3").unwrap()),
            vec![(
                "ngc-cache.site/nvidia/pytorch:24.01-py3".into(),
                false,
                false
            )]
        );
        assert_eq!(
            r.sources("nvcr.io/nvidia/pytorch@sha256:ab").unwrap().len(),
            2
        );
        assert_eq!(
            refs(r.sources("reg.internal.site:5000/x/y:1").unwrap()),
            vec![("reg.internal.site:5000/x/y:1".into(), true, false)]
        );
        assert_eq!(
            refs(r.sources("quay.io/x/y:1").unwrap()),
            vec![("quay.io/x/y:1".into(), false, false)]
        );
    }

    #[test]
    fn short_names_by_alias_then_search_registries() {
        let file: File = toml::from_str(CONF).unwrap();
        let mut r = regs();
        r.search = file.unqualified_search_registries.unwrap();
        assert_eq!(
            r.short_name_candidates("ubuntu", ":24.04"),
            ["docker.io/library/ubuntu:24.04"]
        );
        r.search = vec!["registry.site".into(), "docker.io".into()];
        assert_eq!(
            r.short_name_candidates("team/app", "@sha256:ab"),
            [
                "registry.site/team/app@sha256:ab",
                "docker.io/team/app@sha256:ab"
            ]
        );
        r.aliases
            .insert("app".into(), "registry.site/team/app".into());
        assert_eq!(
            r.short_name_candidates("app", ":1"),
            ["registry.site/team/app:1"]
        );
        assert!(Registries::default()
            .short_name_candidates("x", "")
            .is_empty());
    }

    #[test]
    fn a_later_table_for_a_prefix_replaces_the_earlier() {
        let mut r = regs();
        r.add(vec![Entry {
            prefix: "docker.io".into(),
            location: "docker.io".into(),
            ..Entry::default()
        }]);
        assert_eq!(r.sources("docker.io/library/ubuntu:1").unwrap().len(), 1);
    }
}
