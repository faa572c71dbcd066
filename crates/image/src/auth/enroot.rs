//! enroot's credentials file, `$ENROOT_CONFIG_PATH/.credentials` (by
//! default `~/.config/enroot/.credentials`), read after the auth.json
//! files so that enroot users' logins work unchanged: netrc entries
//! `machine HOST login USER password PASS` (and `default login ...`),
//! where PASS may be `$(command)`, run by `sh` when that registry is asked
//! for (ECR, GCR and ACR tokens). Docker Hub's entry may name its token
//! host, `auth.docker.io`, as enroot's documentation does. A file that
//! runs commands must be the caller's and writable by no one else.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use super::Credentials;
use crate::error::{Error, Result};

/// The file enroot reads, from the environment.
pub fn path_from_env() -> Option<PathBuf> {
    let var = |k: &str| {
        std::env::var_os(k)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    let dir = var("ENROOT_CONFIG_PATH").or_else(|| {
        var("XDG_CONFIG_HOME")
            .or_else(|| var("HOME").map(|h| h.join(".config")))
            .map(|c| c.join("enroot"))
    })?;
    Some(dir.join(".credentials"))
}

/// One entry: the machine (`None` for `default`), login and password.
#[derive(Debug, PartialEq, Eq)]
struct Entry {
    machine: Option<String>,
    login: String,
    password: String,
}

/// The file's words, a `$(...)` kept whole.
fn words(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for line in text.lines() {
        let line = line.trim();
        if line.starts_with('#') {
            continue;
        }
        let mut chars = line.chars().peekable();
        while let Some(c) = chars.peek().copied() {
            if c.is_whitespace() {
                chars.next();
                continue;
            }
            let mut word = String::new();
            let mut depth = 0i32;
            while let Some(&c) = chars.peek() {
                if c.is_whitespace() && depth == 0 {
                    break;
                }
                if c == '(' && (word.ends_with('$') || depth > 0) {
                    depth += 1;
                } else if c == ')' && depth > 0 {
                    depth -= 1;
                }
                word.push(c);
                chars.next();
            }
            out.push(word);
        }
    }
    out
}

fn entries(text: &str) -> Vec<Entry> {
    let mut out: Vec<Entry> = Vec::new();
    let mut it = words(text).into_iter();
    while let Some(w) = it.next() {
        match w.as_str() {
            "machine" => out.push(Entry {
                machine: it.next(),
                login: String::new(),
                password: String::new(),
            }),
            "default" => out.push(Entry {
                machine: None,
                login: String::new(),
                password: String::new(),
            }),
            "login" | "password" => {
                let value = it.next().unwrap_or_default();
                if let Some(e) = out.last_mut() {
                    if w == "login" {
                        e.login = value;
                    } else {
                        e.password = value;
                    }
                }
            }
            _ => {}
        }
    }
    out
}

/// Whether `machine` names `registry` (`host[:port]`).
fn names(machine: &str, registry: &str) -> bool {
    const HUB: &[&str] = &[
        "docker.io",
        "registry-1.docker.io",
        "index.docker.io",
        "auth.docker.io",
    ];
    let host = registry.rsplit_once(':').map_or(registry, |(h, _)| h);
    machine == registry || machine == host || (HUB.contains(&registry) && HUB.contains(&machine))
}

/// Credentials for `registry` from `file`, if it names it (or has a
/// `default`).
pub fn lookup(file: &Path, registry: &str) -> Result<Option<Credentials>> {
    let auth = |detail: String| Error::Auth {
        registry: registry.to_string(),
        detail,
    };
    let text = match std::fs::read_to_string(file) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(auth(format!("cannot read {}: {e}", file.display()))),
    };
    let all = entries(&text);
    let Some(entry) = all
        .iter()
        .find(|e| e.machine.as_deref().is_some_and(|m| names(m, registry)))
        .or_else(|| all.iter().find(|e| e.machine.is_none()))
    else {
        return Ok(None);
    };
    let password = match entry
        .password
        .strip_prefix("$(")
        .and_then(|p| p.strip_suffix(')'))
    {
        Some(command) => {
            let m = std::fs::metadata(file)
                .map_err(|e| auth(format!("cannot read {}: {e}", file.display())))?;
            if m.uid() != rustix::process::getuid().as_raw() || m.mode() & 0o022 != 0 {
                return Err(auth(format!(
                    "{} runs commands for passwords but is not yours alone (owner uid {}, mode {:o}): \
                     chmod go-w it, or write the password itself",
                    file.display(),
                    m.uid(),
                    m.mode() & 0o7777
                )));
            }
            run(command).map_err(|why| {
                auth(format!(
                    "the password command of {} for {registry} failed: {why}",
                    file.display()
                ))
            })?
        }
        None => entry.password.clone(),
    };
    Ok(Some(Credentials {
        username: entry.login.clone(),
        password,
    }))
}

/// `sh -c command`'s output, without its final newline.
fn run(command: &str) -> std::result::Result<String, String> {
    let out = std::process::Command::new("/bin/sh")
        .arg("-c")
        .arg(command)
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|e| e.to_string())?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        return Err(format!(
            "{} ({})",
            err.lines().last().unwrap_or("no message"),
            out.status
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout)
        .trim_end_matches('\n')
        .to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    const FILE: &str = "# NGC\nmachine nvcr.io login $oauthtoken password nvapi-1\n\
        machine auth.docker.io login hubuser\n  password hubpass\n\
        machine 123.dkr.ecr.eu-west-2.amazonaws.com login AWS password $(printf 'tok en')\n\
        machine reg.site:5000 login a password b\n";

    fn file(text: &str, mode: u32) -> (tempfile::TempDir, PathBuf) {
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join(".credentials");
        std::fs::write(&f, text).unwrap();
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(mode)).unwrap();
        (d, f)
    }

    #[test]
    fn machines_hub_aliases_commands_and_default() {
        let (_d, f) = file(FILE, 0o600);
        let c = |r: &str| lookup(&f, r).unwrap().map(|c| (c.username, c.password));
        assert_eq!(c("nvcr.io"), Some(("$oauthtoken".into(), "nvapi-1".into())));
        assert_eq!(c("docker.io"), Some(("hubuser".into(), "hubpass".into())));
        assert_eq!(
            c("123.dkr.ecr.eu-west-2.amazonaws.com"),
            Some(("AWS".into(), "tok en".into()))
        );
        assert_eq!(c("reg.site:5000"), Some(("a".into(), "b".into())));
        assert_eq!(c("other.io"), None);
        let (_d, f) = file("default login u password p\n", 0o600);
        assert_eq!(lookup(&f, "x.io").unwrap().unwrap().username, "u");
        assert_eq!(
            lookup(Path::new("/nonexistent/.credentials"), "x.io").unwrap(),
            None
        );
    }

    #[test]
    fn commands_only_from_a_file_no_one_else_writes() {
        let (_d, f) = file(FILE, 0o622);
        let e = lookup(&f, "123.dkr.ecr.eu-west-2.amazonaws.com").unwrap_err();
        assert!(e.to_string().contains("not yours alone"), "{e}");
        // Plain passwords are read still.
        assert!(lookup(&f, "nvcr.io").unwrap().is_some());
        let (_d, f) = file("machine r.io login u password $(exit 3)\n", 0o600);
        let e = lookup(&f, "r.io").unwrap_err();
        assert!(e.to_string().contains("password command"), "{e}");
    }
}
