//! Registry credentials in the `auth.json` format shared by podman, skopeo,
//! buildah and docker (`{"auths": {"host[:port]": {"auth": base64(user:pass)}}}`).
//!
//! Read, first match wins: `$REGISTRY_AUTH_FILE`,
//! `$XDG_RUNTIME_DIR/containers/auth.json`, `~/.config/containers/auth.json`,
//! `~/.docker/config.json`. `berth login` writes the first of the first three
//! that applies; on HPC login nodes `XDG_RUNTIME_DIR` is often unset or wiped
//! at logout, hence the fallback under `~/.config`. enroot's credentials
//! file comes last ([`enroot`]). An auth file's `credHelpers` and
//! `credsStore` name docker credential helpers (`helper`).

pub mod enroot;
mod helper;

use std::collections::BTreeMap;
use std::fs;
use std::io::Write;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

use base64::Engine as _;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// A username and password (or token) for one registry.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    /// User name.
    pub username: String,
    /// Password or access token.
    pub password: String,
}

/// The user name that stands for an identity token (docker's convention,
/// in credential helpers' answers): the password is then an OAuth2
/// refresh token, exchanged at the registry's token server.
pub const IDENTITY_TOKEN_USER: &str = "<token>";

impl Credentials {
    /// Whether the password is an identity token ([`IDENTITY_TOKEN_USER`]).
    pub fn is_identity_token(&self) -> bool {
        self.username == IDENTITY_TOKEN_USER
    }
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Credentials({}, ****)", self.username)
    }
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct AuthFile {
    #[serde(default)]
    auths: BTreeMap<String, AuthEntry>,
    #[serde(flatten)]
    rest: BTreeMap<String, serde_json::Value>,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct AuthEntry {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    auth: Option<String>,
    /// An OAuth2 refresh token `docker login` keeps for registries that
    /// give one (used instead of `auth`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    identitytoken: Option<String>,
    #[serde(flatten)]
    rest: BTreeMap<String, serde_json::Value>,
}

/// Where credentials are looked up, resolved from the environment.
#[derive(Debug, Clone)]
pub struct AuthFiles {
    /// Files read, in order.
    pub read: Vec<PathBuf>,
    /// The file `berth login` writes; `None` with no place for it (no
    /// `REGISTRY_AUTH_FILE`, `XDG_*` or `HOME`: never the cwd).
    pub write: Option<PathBuf>,
    /// enroot's credentials file, read last
    /// ([`enroot`]).
    pub enroot: Option<PathBuf>,
}

impl AuthFiles {
    /// From the process environment.
    pub fn from_env() -> Self {
        let var = |k: &str| {
            std::env::var_os(k)
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
        };
        Self {
            enroot: enroot::path_from_env(),
            ..Self::from_parts(
                var("REGISTRY_AUTH_FILE"),
                var("XDG_RUNTIME_DIR"),
                var("XDG_CONFIG_HOME"),
                var("HOME"),
            )
        }
    }

    /// The pure part of [`AuthFiles::from_env`].
    pub fn from_parts(
        explicit: Option<PathBuf>,
        runtime_dir: Option<PathBuf>,
        config_home: Option<PathBuf>,
        home: Option<PathBuf>,
    ) -> Self {
        let mut read = Vec::new();
        if let Some(f) = &explicit {
            read.push(f.clone());
        }
        if let Some(r) = &runtime_dir {
            read.push(r.join("containers/auth.json"));
        }
        let config = config_home.or_else(|| home.as_ref().map(|h| h.join(".config")));
        if let Some(c) = &config {
            read.push(c.join("containers/auth.json"));
        }
        if let Some(h) = &home {
            read.push(h.join(".docker/config.json"));
        }
        let write = explicit
            .or_else(|| {
                runtime_dir
                    .filter(|r| r.is_dir())
                    .map(|r| r.join("containers/auth.json"))
            })
            .or_else(|| config.map(|c| c.join("containers/auth.json")));
        Self {
            read,
            write,
            enroot: None,
        }
    }

    /// Credentials for `registry` (`host[:port]`) and `repository`, if any file has them.
    pub fn lookup(&self, registry: &str, repository: &str) -> Result<Option<Credentials>> {
        for file in &self.read {
            let parsed = match read_file(file) {
                Ok(Some(p)) => p,
                Ok(None) => continue,
                Err(e) => return Err(e),
            };
            // As docker: a helper for this registry, then the file's own
            // entry, then the helper for every registry.
            let reg = normalize_key(registry);
            if let Some(h) = helper::per_registry(&parsed.rest, &reg, normalize_key) {
                return helper::get(&h, &reg);
            }
            if let Some(c) = find_in(&parsed, registry, repository, file)? {
                return Ok(Some(c));
            }
            if let Some(h) = helper::store(&parsed.rest) {
                if let Some(c) = helper::get(&h, &reg)? {
                    return Ok(Some(c));
                }
            }
        }
        match &self.enroot {
            Some(f) => enroot::lookup(f, registry),
            None => Ok(None),
        }
    }

    /// Stores credentials for `registry` in the login file (mode 0600).
    pub fn store(&self, registry: &str, creds: &Credentials) -> Result<PathBuf> {
        let path = self.write.as_ref().ok_or(Error::NoAuthFile)?;
        let mut parsed = read_file(path)?.unwrap_or_default();
        let token = base64::engine::general_purpose::STANDARD
            .encode(format!("{}:{}", creds.username, creds.password));
        parsed.auths.entry(registry.to_string()).or_default().auth = Some(token);
        write_file(path, &parsed)?;
        Ok(path.clone())
    }

    /// Removes `registry` from every writable file that has it. Returns
    /// whether any entry was removed.
    pub fn remove(&self, registry: &str) -> Result<bool> {
        let mut removed = false;
        for file in &self.read {
            if file.ends_with(".docker/config.json") && Some(file) != self.write.as_ref() {
                continue;
            }
            let Some(mut parsed) = read_file(file)? else {
                continue;
            };
            let keys: Vec<String> = parsed
                .auths
                .keys()
                .filter(|k| normalize_key(k) == normalize_key(registry))
                .cloned()
                .collect();
            if keys.is_empty() {
                continue;
            }
            for k in keys {
                parsed.auths.remove(&k);
            }
            write_file(file, &parsed)?;
            removed = true;
        }
        Ok(removed)
    }
}

fn read_file(path: &Path) -> Result<Option<AuthFile>> {
    match fs::read(path) {
        Ok(bytes) if bytes.iter().all(u8::is_ascii_whitespace) => Ok(Some(AuthFile::default())),
        Ok(bytes) => serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| Error::Input {
                path: path.to_path_buf(),
                source: std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    format!("not a valid auth file: {e}"),
                ),
            }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => Ok(None),
        Err(e) => Err(Error::Input {
            path: path.to_path_buf(),
            source: e,
        }),
    }
}

fn write_file(path: &Path, parsed: &AuthFile) -> Result<()> {
    if let Some(parent) = path.parent() {
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(parent)
            .map_err(|e| Error::store("create", parent, e))?;
    }
    let bytes = serde_json::to_vec_pretty(parsed)
        .map_err(|e| Error::BadImage(format!("cannot encode auth file: {e}")))?;
    // A fresh file of a random name (O_EXCL, mode 0600) beside the target,
    // renamed over it: a symlink planted at a predictable name is never
    // followed, and the mode holds whoever made the directory.
    let dir = path.parent().unwrap_or(Path::new("/"));
    let mut tmp = tempfile::Builder::new()
        .prefix(".auth.json.")
        .tempfile_in(dir)
        .map_err(|e| Error::store("write", dir, e))?;
    tmp.write_all(&bytes)
        .and_then(|()| tmp.as_file().sync_all())
        .map_err(|e| Error::store("write", tmp.path().to_path_buf(), e))?;
    tmp.persist(path)
        .map_err(|e| Error::store("write", path, e.error))?;
    Ok(())
}

/// `https://index.docker.io/v1/` and friends name Docker Hub.
fn normalize_key(key: &str) -> String {
    let k = key
        .trim_start_matches("https://")
        .trim_start_matches("http://");
    let k = k
        .strip_suffix("/v1/")
        .or_else(|| k.strip_suffix("/v2/"))
        .unwrap_or(k);
    let k = k.trim_end_matches('/');
    match k {
        "index.docker.io" | "registry-1.docker.io" | "docker.io" => "docker.io".to_string(),
        other => other.to_string(),
    }
}

fn find_in(
    parsed: &AuthFile,
    registry: &str,
    repository: &str,
    file: &Path,
) -> Result<Option<Credentials>> {
    let reg = normalize_key(registry);
    let full = format!("{reg}/{repository}");
    // Longest match wins: `reg/ns/repo` entries before `reg/ns`, before `reg`.
    let mut best: Option<(&str, &AuthEntry)> = None;
    for (key, entry) in &parsed.auths {
        let k = normalize_key(key);
        let hit = k == reg || (full.starts_with(&k) && full.as_bytes().get(k.len()) == Some(&b'/'));
        let usable = entry.auth.is_some() || entry.identitytoken.is_some();
        if hit && usable && best.is_none_or(|(b, _)| normalize_key(b).len() < k.len()) {
            best = Some((key, entry));
        }
    }
    let Some((key, entry)) = best else {
        return Ok(None);
    };
    if let Some(refresh) = entry.identitytoken.as_ref().filter(|t| !t.is_empty()) {
        return Ok(Some(Credentials {
            username: IDENTITY_TOKEN_USER.to_string(),
            password: refresh.clone(),
        }));
    }
    let Some(token) = &entry.auth else {
        return Ok(None);
    };
    let bad = |why: &str| Error::Input {
        path: file.to_path_buf(),
        source: std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("entry {key:?}: {why}"),
        ),
    };
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(token.trim())
        .map_err(|_| bad("`auth` is not base64"))?;
    let text = String::from_utf8(decoded).map_err(|_| bad("`auth` is not UTF-8"))?;
    let (user, pass) = text
        .split_once(':')
        .ok_or_else(|| bad("`auth` is not user:password"))?;
    Ok(Some(Credentials {
        username: user.to_string(),
        password: pass.to_string(),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn store_lookup_remove() {
        let dir = tempfile::tempdir().unwrap();
        let files =
            AuthFiles::from_parts(None, None, Some(dir.path().into()), Some(dir.path().into()));
        assert_eq!(files.write, Some(dir.path().join("containers/auth.json")));
        let c = Credentials {
            username: "u".into(),
            password: "p:w".into(),
        };
        files.store("127.0.0.1:5001", &c).unwrap();
        assert_eq!(files.lookup("127.0.0.1:5001", "x/y").unwrap(), Some(c));
        assert_eq!(files.lookup("127.0.0.1:5000", "x/y").unwrap(), None);
        use std::os::unix::fs::PermissionsExt;
        let mode = fs::metadata(files.write.as_ref().unwrap())
            .unwrap()
            .permissions()
            .mode()
            & 0o777;
        assert_eq!(mode, 0o600);
        assert!(files.remove("127.0.0.1:5001").unwrap());
        assert_eq!(files.lookup("127.0.0.1:5001", "x/y").unwrap(), None);
    }

    /// An entry's `identitytoken` is used instead of its `auth` (as
    /// docker does), and a login to another registry keeps it.
    #[test]
    fn identity_tokens_are_read_and_kept() {
        let dir = tempfile::tempdir().unwrap();
        let files =
            AuthFiles::from_parts(None, None, Some(dir.path().into()), Some(dir.path().into()));
        let path = files.write.clone().unwrap();
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(
            &path,
            r#"{"auths": {"r.io": {"auth": "dTpw", "identitytoken": "refresh-1"}}}"#,
        )
        .unwrap();
        let c = files.lookup("r.io", "a/b").unwrap().unwrap();
        assert!(c.is_identity_token());
        assert_eq!(c.password, "refresh-1");
        let other = Credentials {
            username: "u".into(),
            password: "p".into(),
        };
        files.store("s.io", &other).unwrap();
        assert_eq!(files.lookup("r.io", "a/b").unwrap(), Some(c));
        assert_eq!(files.lookup("s.io", "a/b").unwrap(), Some(other));
    }

    /// L10: no file is written in the cwd when no place is known, and a
    /// symlink planted at a predictable temporary name is not followed.
    #[test]
    fn credentials_go_only_to_a_fresh_private_file() {
        let files = AuthFiles::from_parts(None, None, None, None);
        let c = Credentials {
            username: "u".into(),
            password: "p".into(),
        };
        assert!(matches!(files.store("r.io", &c), Err(Error::NoAuthFile)));
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        fs::write(&victim, "keep\n").unwrap();
        let target = dir.path().join("auth.json");
        std::os::unix::fs::symlink(&victim, dir.path().join("auth.json.tmp")).unwrap();
        let files = AuthFiles::from_parts(Some(target.clone()), None, None, None);
        files.store("r.io", &c).unwrap();
        assert_eq!(fs::read_to_string(&victim).unwrap(), "keep\n");
        use std::os::unix::fs::PermissionsExt;
        let mode = fs::metadata(&target).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
    }

    #[test]
    fn docker_config_and_scoped_keys() {
        let dir = tempfile::tempdir().unwrap();
        fs::create_dir_all(dir.path().join(".docker")).unwrap();
        let b = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
        fs::write(
            dir.path().join(".docker/config.json"),
            format!(
                r#"{{"auths":{{"https://index.docker.io/v1/":{{"auth":"{}"}},"reg.io":{{"auth":"{}"}},"reg.io/team":{{"auth":"{}"}}}},"credsStore":"x"}}"#,
                b("hub:1"),
                b("all:2"),
                b("team:3")
            ),
        )
        .unwrap();
        let files = AuthFiles::from_parts(None, None, None, Some(dir.path().into()));
        let user = |r: &str, repo: &str| files.lookup(r, repo).unwrap().map(|c| c.username);
        assert_eq!(user("docker.io", "library/debian").as_deref(), Some("hub"));
        assert_eq!(user("reg.io", "team/app").as_deref(), Some("team"));
        assert_eq!(user("reg.io", "other/app").as_deref(), Some("all"));
        assert_eq!(user("reg.io", "teamx/app").as_deref(), Some("all"));
    }
}
