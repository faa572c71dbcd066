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
    /// Relative path as named (empty: the root itself); a copy into a
    /// directory takes its last component as the name.
    pub rel: String,
    /// Where it is read from: `rel` with every symlink resolved inside the
    /// root ([`resolve_in_scope`]), so no read leaves the root.
    pub src: String,
}

/// As BuildKit resolves COPY sources: `rel`'s symlinks (the last one
/// included) are followed with `root` as the root, so an absolute target
/// starts again at `root` and a `..` stops there; nothing outside `root` is
/// ever reached. Returns the resolved path relative to `root` (components
/// that do not exist are kept as named). A loop is an error.
pub fn resolve_in_scope(root: &Path, rel: &str) -> Result<String> {
    follow_in_root(root, rel, AtRoot::Stay).map_err(|e| match e {
        Unresolved::Read(path, e) => Error::io("read", path, e),
        other => Error::Source(format!("{rel}: {other} in the build context")),
    })
}

/// What a `..` does at the root in [`follow_in_root`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AtRoot {
    /// Stays at the root (BuildKit's scope, a chroot).
    Stay,
    /// Is refused (layer entries: nothing may climb out).
    Refuse,
}

/// Why [`follow_in_root`] gave up.
#[derive(Debug)]
pub enum Unresolved {
    /// A `..` climbed above the root ([`AtRoot::Refuse`]).
    AboveRoot,
    /// More than 255 symlinks: a loop.
    Loop,
    /// A symlink could not be read.
    Read(PathBuf, std::io::Error),
}

impl std::fmt::Display for Unresolved {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Unresolved::AboveRoot => {
                write!(f, "lies below a symlink whose target climbs above the root")
            }
            Unresolved::Loop => write!(f, "too many levels of symlinks"),
            Unresolved::Read(p, e) => write!(f, "cannot read the symlink {}: {e}", p.display()),
        }
    }
}

/// `rel` below `root` with every symlink on the way (the last one too)
/// followed inside `root`: an absolute target starts again at `root`, and
/// `..` at the root does what `at_root` says. Components that do not exist
/// are kept as named. Returns the path relative to `root`.
pub fn follow_in_root(
    root: &Path,
    rel: &str,
    at_root: AtRoot,
) -> std::result::Result<String, Unresolved> {
    let mut todo: Vec<String> = rel
        .split('/')
        .filter(|c| !c.is_empty())
        .rev()
        .map(String::from)
        .collect();
    let mut cur: Vec<String> = Vec::new();
    let mut hops = 0;
    while let Some(c) = todo.pop() {
        match c.as_str() {
            "." => continue,
            ".." => {
                if cur.pop().is_none() && at_root == AtRoot::Refuse {
                    return Err(Unresolved::AboveRoot);
                }
                continue;
            }
            _ => {}
        }
        cur.push(c);
        let here = root.join(cur.join("/"));
        let Ok(meta) = fs::symlink_metadata(&here) else {
            continue;
        };
        if !meta.file_type().is_symlink() {
            continue;
        }
        hops += 1;
        if hops > 255 {
            return Err(Unresolved::Loop);
        }
        let target = fs::read_link(&here).map_err(|e| Unresolved::Read(here.clone(), e))?;
        let target = target.to_string_lossy().into_owned();
        cur.pop();
        if target.starts_with('/') {
            cur.clear();
        }
        todo.extend(
            target
                .split('/')
                .filter(|c| !c.is_empty())
                .rev()
                .map(String::from),
        );
    }
    Ok(cur.join("/"))
}

/// Expands COPY `source` (a path or glob, relative to `root`; `..` cannot
/// leave it) to the entries it names, skipping ignored ones.
pub fn expand_source(root: &Path, source: &str, ignore: &Ignore) -> Result<Vec<Match>> {
    let cleaned = clean(source);
    let has_glob = cleaned.contains(['*', '?', '[']);
    if !has_glob {
        let src = resolve_in_scope(root, &cleaned)?;
        if fs::symlink_metadata(root.join(&src)).is_err()
            || (!cleaned.is_empty() && ignore.excludes(&cleaned))
            || (!src.is_empty() && ignore.excludes(&src))
        {
            return Err(Error::Source(format!(
                "{source}: not found in the build context (or excluded by .dockerignore; symlinks are followed inside the context only)"
            )));
        }
        return Ok(vec![Match { rel: cleaned, src }]);
    }
    let mut named = Vec::new();
    walk(root, "", &mut |rel, _| {
        if glob_match(&cleaned, rel) && !ignore.excludes(rel) {
            named.push(rel.to_string());
        }
    })?;
    let mut found = Vec::new();
    for rel in named {
        let src = resolve_in_scope(root, &rel)?;
        // A link to nothing (in the context) is skipped, as a glob would.
        if fs::symlink_metadata(root.join(&src)).is_ok() && !ignore.excludes(&src) {
            found.push(Match { rel, src });
        }
    }
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
    // An entry removed (or a directory replaced) while the walk runs (a
    // live container's upper directory) is skipped, not an error.
    let listing = match fs::read_dir(&dir) {
        Err(e) if !rel.is_empty() && gone(&e) => return Ok(()),
        listing => listing.map_err(|e| Error::io("read", &dir, e))?,
    };
    let mut entries: Vec<_> = listing.flatten().map(|e| e.file_name()).collect();
    entries.sort();
    for os_name in entries {
        let name = os_name.to_string_lossy();
        let child = if rel.is_empty() {
            name.to_string()
        } else {
            format!("{rel}/{name}")
        };
        let meta = match fs::symlink_metadata(root.join(&child)) {
            // (A name that is not UTF-8 is not found under its lossy
            // spelling: that stays an error.)
            Err(e) if os_name.to_str().is_some() && gone(&e) => continue,
            meta => meta.map_err(|e| Error::io("inspect", root.join(&child), e))?,
        };
        f(&child, &meta);
        if meta.is_dir() {
            walk(root, &child, f)?;
        }
    }
    Ok(())
}

/// Whether `e` says a path is gone: removed, or a directory on it
/// replaced by something else.
pub(crate) fn gone(e: &std::io::Error) -> bool {
    e.kind() == std::io::ErrorKind::NotFound || e.raw_os_error() == Some(libc::ENOTDIR)
}

/// The content hash of COPY sources: relative paths, types, modes and
/// contents (not times or owners: the copy sets those), for the cache key.
pub fn hash_sources(root: &Path, matches: &[Match], ignore: &Ignore) -> Result<String> {
    let mut h = Sha256::new();
    // `name` goes into the key, `rel` is read.
    let mut add = |name: &str, rel: &str, meta: &fs::Metadata| -> Result<()> {
        let path = root.join(rel);
        h.update(name.as_bytes());
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
        let path = root.join(&m.src);
        let meta = fs::symlink_metadata(&path).map_err(|e| Error::io("inspect", &path, e))?;
        add(&m.rel, &m.src, &meta)?;
        if meta.is_dir() {
            let mut below = Vec::new();
            walk(root, &m.src, &mut |rel, meta| {
                if !ignore.excludes(rel) {
                    below.push((rel.to_string(), meta.clone()));
                }
            })?;
            for (rel, meta) in below {
                add(&rel, &rel, &meta)?;
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
    fn copy_sources_resolve_symlinks_inside_the_context() {
        let t = tempfile::tempdir().unwrap();
        let outside = t.path().join("outside");
        let ctx = t.path().join("ctx");
        fs::create_dir_all(outside.join("secret")).unwrap();
        fs::write(outside.join("secret/key"), "private").unwrap();
        fs::create_dir_all(ctx.join("sub")).unwrap();
        fs::write(ctx.join("sub/file"), "inside").unwrap();
        let ln =
            |target: &str, name: &str| std::os::unix::fs::symlink(target, ctx.join(name)).unwrap();
        ln("../outside", "rel-out");
        ln("../../../../../../../..", "deep-up");
        ln(outside.to_str().unwrap(), "abs-out");
        ln("sub", "in");
        ln("/sub/file", "abs-in");
        let ignore = Ignore::parse("");
        // Inside symlinks work, absolute ones start at the context.
        let m = expand_source(&ctx, "in/file", &ignore).unwrap();
        assert_eq!(
            (m[0].rel.as_str(), m[0].src.as_str()),
            ("in/file", "sub/file")
        );
        assert_eq!(
            expand_source(&ctx, "abs-in", &ignore).unwrap()[0].src,
            "sub/file"
        );
        // Links out of the context never reach outside it.
        for s in [
            "rel-out/secret/key",
            "deep-up/outside/secret/key",
            "abs-out/secret/key",
            "rel-out",
        ] {
            match expand_source(&ctx, s, &ignore) {
                Err(e) => assert!(e.to_string().contains("not found"), "{s}: {e}"),
                Ok(m) => {
                    assert!(!ctx.join(&m[0].src).starts_with(&outside), "{s}: {m:?}");
                    let h = hash_sources(&ctx, &m, &ignore).unwrap();
                    assert!(!h.is_empty());
                }
            }
        }
        // `deep-up/sub/file` climbs to the context's root and stops there.
        assert_eq!(
            expand_source(&ctx, "deep-up/sub/file", &ignore).unwrap()[0].src,
            "sub/file"
        );
        // Globs match links; they resolve in the context too.
        let m = expand_source(&ctx, "abs-*", &ignore).unwrap();
        assert!(
            m.iter().all(|m| !ctx.join(&m.src).starts_with(&outside)),
            "{m:?}"
        );
    }

    #[test]
    fn destinations() {
        assert_eq!(resolve_dest("app/", "/srv"), "/srv/app/");
        assert_eq!(resolve_dest("/x/../y", "/"), "/y");
        assert_eq!(resolve_dest(".", "/w"), "/w/");
        assert_eq!(clean("../../etc/passwd"), "etc/passwd");
    }
}
