//! The build context: `.dockerignore`, COPY source globs (Go's
//! `filepath.Match` rules: `*`, `?`, `[...]`; `**` in ignore files), and
//! the content hash of COPY sources that keys the build cache.

use std::fs;
use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::path::{Component, Path, PathBuf};

use sha2::{Digest, Sha256};

use crate::{Error, Result};

/// Whether `name` matches `pattern` (one path, `/`-separated). `*` and `?`
/// do not cross `/`; `**` (a whole component) matches any number of them.
pub fn glob_match(pattern: &str, name: &str) -> bool {
    let p: Vec<&str> = pattern.split('/').filter(|c| !c.is_empty()).collect();
    let n: Vec<&str> = name.split('/').filter(|c| !c.is_empty()).collect();
    match_components(&p, &n)
}

fn match_components(p: &[&str], n: &[&str]) -> bool {
    match p.first() {
        None => n.is_empty(),
        Some(&"**") => (0..=n.len()).any(|skip| match_components(&p[1..], &n[skip..])),
        Some(first) => {
            !n.is_empty()
                && match_one(first.as_bytes(), n[0].as_bytes())
                && match_components(&p[1..], &n[1..])
        }
    }
}

/// One component against one pattern component.
fn match_one(p: &[u8], n: &[u8]) -> bool {
    match p.first() {
        None => n.is_empty(),
        Some(b'*') => (0..=n.len()).any(|i| match_one(&p[1..], &n[i..])),
        Some(b'?') => !n.is_empty() && match_one(&p[1..], &n[1..]),
        Some(b'[') => {
            let Some(end) = p.iter().skip(1).position(|c| *c == b']').map(|e| e + 1) else {
                return !n.is_empty() && n[0] == b'[' && match_one(&p[1..], &n[1..]);
            };
            if n.is_empty() {
                return false;
            }
            let mut class = &p[1..end];
            let negate = matches!(class.first(), Some(b'^' | b'!'));
            if negate {
                class = &class[1..];
            }
            let c = n[0];
            let mut hit = false;
            let mut i = 0;
            while i < class.len() {
                if i + 2 < class.len() && class[i + 1] == b'-' {
                    hit |= class[i] <= c && c <= class[i + 2];
                    i += 3;
                } else {
                    hit |= class[i] == c;
                    i += 1;
                }
            }
            hit != negate && match_one(&p[end + 1..], &n[1..])
        }
        Some(b'\\') if p.len() > 1 => !n.is_empty() && n[0] == p[1] && match_one(&p[2..], &n[1..]),
        Some(c) => !n.is_empty() && n[0] == *c && match_one(&p[1..], &n[1..]),
    }
}

/// `.dockerignore` rules: the last matching line wins, `!` re-includes; a
/// rule that matches a directory excludes what is below it.
#[derive(Debug, Default, Clone)]
pub struct Ignore {
    rules: Vec<(bool, String)>,
}

impl Ignore {
    /// Reads `CONTEXT/.dockerignore` (none: nothing is ignored).
    pub fn load(context: &Path) -> Self {
        let text = fs::read_to_string(context.join(".dockerignore")).unwrap_or_default();
        Self::parse(&text)
    }

    /// Parses the file's text.
    pub fn parse(text: &str) -> Self {
        let rules = text
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
            .map(|l| match l.strip_prefix('!') {
                Some(rest) => (false, clean(rest.trim())),
                None => (true, clean(l)),
            })
            .filter(|(_, p)| !p.is_empty())
            .collect();
        Self { rules }
    }

    /// Whether the context-relative `path` is left out.
    pub fn excludes(&self, path: &str) -> bool {
        let mut excluded = false;
        let comps: Vec<&str> = path.split('/').collect();
        for (exclude, pattern) in &self.rules {
            let hit = (1..=comps.len()).any(|k| glob_match(pattern, &comps[..k].join("/")));
            if hit {
                excluded = *exclude;
            }
        }
        excluded
    }
}

/// A path cleaned as Go's `filepath.Clean`, relative, without `.`.
pub fn clean(p: &str) -> String {
    let mut out: Vec<&str> = Vec::new();
    for c in p.split('/') {
        match c {
            "" | "." => {}
            ".." => {
                out.pop();
            }
            c => out.push(c),
        }
    }
    out.join("/")
}

/// A COPY source matched in a root: its path relative to the root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Match {
    /// Relative path (empty: the root itself).
    pub rel: String,
}

/// Expands COPY `source` (a path or glob, relative to `root`; `..` cannot
/// leave it) to the entries it names, skipping ignored ones.
pub fn expand_source(root: &Path, source: &str, ignore: &Ignore) -> Result<Vec<Match>> {
    let cleaned = clean(source);
    let has_glob = cleaned.contains(['*', '?', '[']);
    if !has_glob {
        let path = root.join(&cleaned);
        if fs::symlink_metadata(&path).is_err()
            || (!cleaned.is_empty() && ignore.excludes(&cleaned))
        {
            return Err(Error::Source(format!(
                "{source}: not found in the build context (or excluded by .dockerignore)"
            )));
        }
        return Ok(vec![Match { rel: cleaned }]);
    }
    let mut found = Vec::new();
    walk(root, "", &mut |rel, _| {
        if glob_match(&cleaned, rel) && !ignore.excludes(rel) {
            found.push(Match {
                rel: rel.to_string(),
            });
        }
    })?;
    if found.is_empty() {
        return Err(Error::Source(format!(
            "{source}: no file in the build context matches"
        )));
    }
    found.sort_by(|a, b| a.rel.cmp(&b.rel));
    Ok(found)
}

/// Walks `root/rel` depth first, sorted, calling `f` with each entry's
/// relative path (not following symlinks).
pub fn walk(root: &Path, rel: &str, f: &mut dyn FnMut(&str, &fs::Metadata)) -> Result<()> {
    let dir = if rel.is_empty() {
        root.to_path_buf()
    } else {
        root.join(rel)
    };
    let mut entries: Vec<_> = fs::read_dir(&dir)
        .map_err(|e| Error::io("read", &dir, e))?
        .flatten()
        .map(|e| e.file_name())
        .collect();
    entries.sort();
    for name in entries {
        let name = name.to_string_lossy();
        let child = if rel.is_empty() {
            name.to_string()
        } else {
            format!("{rel}/{name}")
        };
        let meta = fs::symlink_metadata(root.join(&child))
            .map_err(|e| Error::io("inspect", root.join(&child), e))?;
        f(&child, &meta);
        if meta.is_dir() {
            walk(root, &child, f)?;
        }
    }
    Ok(())
}

/// The content hash of COPY sources: relative paths, types, modes and
/// contents (not times or owners: the copy sets those), for the cache key.
pub fn hash_sources(root: &Path, matches: &[Match], ignore: &Ignore) -> Result<String> {
    let mut h = Sha256::new();
    let mut add = |rel: &str, meta: &fs::Metadata| -> Result<()> {
        let path = root.join(rel);
        h.update(rel.as_bytes());
        h.update([0]);
        h.update(format!("{:o}", meta.mode()).as_bytes());
        if meta.file_type().is_symlink() {
            let t = fs::read_link(&path).map_err(|e| Error::io("read", &path, e))?;
            h.update(t.as_os_str().as_encoded_bytes());
        } else if meta.is_file() {
            let mut f = fs::File::open(&path).map_err(|e| Error::io("read", &path, e))?;
            let mut buf = vec![0u8; 1 << 16];
            loop {
                let n = f.read(&mut buf).map_err(|e| Error::io("read", &path, e))?;
                if n == 0 {
                    break;
                }
                h.update(&buf[..n]);
            }
        }
        h.update([0]);
        Ok(())
    };
    for m in matches {
        let path = root.join(&m.rel);
        let meta = fs::symlink_metadata(&path).map_err(|e| Error::io("inspect", &path, e))?;
        add(&m.rel, &meta)?;
        if meta.is_dir() {
            let mut below = Vec::new();
            walk(root, &m.rel, &mut |rel, meta| {
                if !ignore.excludes(rel) {
                    below.push((rel.to_string(), meta.clone()));
                }
            })?;
            for (rel, meta) in below {
                add(&rel, &meta)?;
            }
        }
    }
    Ok(hex(&h.finalize()))
}

/// Lower-case hex.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// `dest` resolved against the working directory, as an absolute path in
/// the image (a trailing `/` kept: it says "into this directory").
pub fn resolve_dest(dest: &str, workdir: &str) -> String {
    let dir_form = dest.ends_with('/') || dest == "." || dest.ends_with("/.");
    let joined = if dest.starts_with('/') {
        dest.to_string()
    } else {
        format!("{}/{dest}", workdir.trim_end_matches('/'))
    };
    let mut out = format!("/{}", clean(&joined));
    if dir_form && out != "/" {
        out.push('/');
    }
    out
}

/// A path inside a root: no component may leave it.
pub fn inside(root: &Path, abs: &str) -> PathBuf {
    let mut p = root.to_path_buf();
    for c in Path::new(abs).components() {
        if let Component::Normal(c) = c {
            p.push(c);
        }
    }
    p
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_follow_go() {
        assert!(glob_match("*.py", "a.py"));
        assert!(!glob_match("*.py", "d/a.py"));
        assert!(glob_match("d/*.py", "d/a.py"));
        assert!(glob_match("a?c", "abc"));
        assert!(glob_match("[a-c]x", "bx"));
        assert!(!glob_match("[!a-c]x", "bx"));
        assert!(glob_match("**/*.o", "x/y/z.o"));
        assert!(glob_match("**/*.o", "z.o"));
    }

    #[test]
    fn dockerignore_last_rule_wins_and_dirs_cover_children() {
        let i = Ignore::parse("# c\n*.log\n!keep.log\nbuild\n");
        assert!(i.excludes("x.log"));
        assert!(!i.excludes("keep.log"));
        assert!(i.excludes("build/a/b"));
        assert!(!i.excludes("src/main.c"));
    }

    #[test]
    fn destinations() {
        assert_eq!(resolve_dest("app/", "/srv"), "/srv/app/");
        assert_eq!(resolve_dest("/x/../y", "/"), "/y");
        assert_eq!(resolve_dest(".", "/w"), "/w/");
        assert_eq!(clean("../../etc/passwd"), "etc/passwd");
    }
}
