//! Where an entry really lands once the layers below it are known.
//!
//! An extractor that unpacks layers in order (umoci, containers/storage with
//! its naive differ, containerd's applier) creates each entry through the
//! directories that exist at that moment: a parent that a lower layer made a
//! symlink (`lib -> usr/lib` on every merged-/usr base) is followed, inside
//! the root, so `lib/newfile` of an upper layer lands at `usr/lib/newfile`.
//! The flattener reads layers from the top down, so it records every
//! directory and symlink it sees with its layer and position ([`Defs`]) and
//! resolves the entries that need the layers below them once those are read.
//!
//! Resolution happens in the root, never on the host: an absolute target
//! starts again at the root, and a `..` that would climb above the root is
//! refused (nothing may land outside it).

use std::collections::HashMap;

/// What a definition makes of a path.
#[derive(Debug, Clone, PartialEq, Eq)]
enum What {
    Dir,
    Symlink(Vec<u8>),
    /// A file, hard link, fifo or device: no directory to walk through.
    Other,
}

/// One definition of a path.
#[derive(Debug, Clone)]
struct Def {
    layer: usize,
    seq: u64,
    what: What,
}

/// Where the flattener emitted a non-directory that is not a symlink:
/// (layer, seq) by path. Emitted files are not copied into [`Defs`].
pub type EmittedOther<'a> = &'a dyn Fn(&[u8]) -> Option<(usize, u64)>;

/// Why a path cannot be resolved inside the root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unresolvable {
    /// Following the symlink at `link` climbs above the root.
    AboveRoot {
        /// The symlink whose target climbs out.
        link: Vec<u8>,
    },
    /// More than [`MAX_HOPS`] symlinks (a loop).
    Loop {
        /// The symlink followed last.
        link: Vec<u8>,
    },
}

/// As the kernel's limit on symlinks followed in one path walk (40).
pub const MAX_HOPS: usize = 40;

/// Every directory and symlink of every layer read so far, by path, the
/// non-directories that were not emitted (shadowed or held back; emitted
/// ones are asked of the flattener), and the whiteouts and opaque markers
/// that hide lower ones. Layers are numbered from the top (0); `seq` orders
/// entries within and across layers.
#[derive(Debug, Default)]
pub struct Defs {
    by_path: HashMap<Vec<u8>, Vec<Def>>,
    whiteouts: HashMap<Vec<u8>, Vec<usize>>,
    opaques: HashMap<Vec<u8>, Vec<usize>>,
}

impl Defs {
    /// Records a directory at `path`.
    pub fn dir(&mut self, path: &[u8], layer: usize, seq: u64) {
        self.push(path, layer, seq, What::Dir);
    }

    /// Records a symlink at `path` pointing to `target` (as written).
    pub fn symlink(&mut self, path: &[u8], layer: usize, seq: u64, target: &[u8]) {
        self.push(path, layer, seq, What::Symlink(target.to_vec()));
    }

    /// Records a non-directory at `path` that the flattener did not emit.
    pub fn other(&mut self, path: &[u8], layer: usize, seq: u64) {
        self.push(path, layer, seq, What::Other);
    }

    fn push(&mut self, path: &[u8], layer: usize, seq: u64, what: What) {
        self.by_path
            .entry(path.to_vec())
            .or_default()
            .push(Def { layer, seq, what });
    }

    /// Records a whiteout of `path` in `layer` (it hides lower layers only).
    pub fn whiteout(&mut self, path: &[u8], layer: usize) {
        self.whiteouts.entry(path.to_vec()).or_default().push(layer);
    }

    /// Records an opaque marker of directory `dir` in `layer`.
    pub fn opaque(&mut self, dir: &[u8], layer: usize) {
        self.opaques.entry(dir.to_vec()).or_default().push(layer);
    }

    /// Whether a definition of `path` in layer `below` is hidden from an
    /// entry of layer `layer` by a layer in between (`layer` included: a
    /// layer's whiteouts apply to the layers below it): a whiteout of the
    /// path or a parent, an opaque parent, or a parent that became a
    /// non-directory (which removed the subtree).
    fn hidden_between(
        &self,
        emitted: EmittedOther<'_>,
        path: &[u8],
        (layer, seq): (usize, u64),
        below: usize,
    ) -> bool {
        let between = |l: usize| (layer..below).contains(&l);
        // A non-directory of the entry's own layer counts only before it.
        let before = |l: usize, s: u64| between(l) && (l != layer || s < seq);
        let within =
            |layers: Option<&Vec<usize>>| layers.is_some_and(|ls| ls.iter().any(|l| between(*l)));
        if within(self.whiteouts.get(path)) {
            return true;
        }
        super::ancestors(path).any(|a| {
            within(self.whiteouts.get(a))
                || within(self.opaques.get(a))
                || emitted(a).is_some_and(|(l, s)| before(l, s))
                || self.by_path.get(a).is_some_and(|defs| {
                    defs.iter()
                        .any(|d| d.what != What::Dir && before(d.layer, d.seq))
                })
        })
    }

    /// The symlink target at `path` as an entry at (`layer`, `seq`) sees
    /// it: the latest definition earlier in its own layer, else the topmost
    /// visible one below. `None` when that is a directory or nothing.
    fn symlink_seen(
        &self,
        emitted: EmittedOther<'_>,
        layer: usize,
        seq: u64,
        path: &[u8],
    ) -> Option<&[u8]> {
        // Candidates as (layer, seq, symlink target if one).
        let defs = self.by_path.get(path).map(|d| &d[..]).unwrap_or(&[]);
        let recorded = defs.iter().map(|d| {
            let target = match &d.what {
                What::Symlink(t) => Some(&t[..]),
                What::Dir | What::Other => None,
            };
            (d.layer, d.seq, target)
        });
        let file = emitted(path).map(|(l, s)| (l, s, None));
        let all = || recorded.clone().chain(file);
        let same = all()
            .filter(|(l, s, _)| *l == layer && *s < seq)
            .max_by_key(|(_, s, _)| *s);
        let (_, _, target) = match same {
            Some(d) => d,
            None => {
                let below = all()
                    .filter(|(l, _, _)| *l > layer)
                    .min_by_key(|(l, s, _)| (*l, std::cmp::Reverse(*s)))?;
                if self.hidden_between(emitted, path, (layer, seq), below.0) {
                    return None;
                }
                below
            }
        };
        target
    }

    /// Whether an entry at (`layer`, `seq`, `path`) is undone by a later
    /// entry of its own layer: one at the same path (directories merge), or a
    /// non-directory at one of its parents, as on extraction.
    pub fn undone_later(
        &self,
        emitted: EmittedOther<'_>,
        layer: usize,
        seq: u64,
        path: &[u8],
        is_dir: bool,
    ) -> bool {
        let later = |p: &[u8], dirs_count: bool| {
            let recorded = self.by_path.get(p).is_some_and(|defs| {
                defs.iter()
                    .any(|d| d.layer == layer && d.seq > seq && (dirs_count || d.what != What::Dir))
            });
            recorded || emitted(p).is_some_and(|(l, s)| l == layer && s > seq)
        };
        later(path, !is_dir) || super::ancestors(path).any(|a| later(a, false))
    }

    /// Resolves the parents of the normalised `path` of an entry at
    /// (`layer`, `seq`) through the symlinks it sees, inside the root. The
    /// last component is kept as it is (an entry replaces a symlink at its
    /// own name, it does not follow it).
    pub fn resolve(
        &self,
        emitted: EmittedOther<'_>,
        layer: usize,
        seq: u64,
        path: &[u8],
    ) -> Result<Vec<u8>, Unresolvable> {
        let (parent, name) = super::split_parent(path);
        // Components still to walk, the next one last.
        let mut todo: Vec<Vec<u8>> = components(parent).rev().map(<[u8]>::to_vec).collect();
        let mut cur: Vec<u8> = Vec::with_capacity(path.len());
        let mut hops = 0;
        while let Some(comp) = todo.pop() {
            if comp == b".." {
                // Only a symlink's target can hold `..` here (names are
                // normalised before), and its climb was checked when it was
                // queued: `cur` is never the root at this point.
                match cur.iter().rposition(|b| *b == b'/') {
                    Some(i) => cur.truncate(i),
                    None => cur.clear(),
                }
                continue;
            }
            let at = cur.len();
            if !cur.is_empty() {
                cur.push(b'/');
            }
            cur.extend_from_slice(&comp);
            let Some(target) = self.symlink_seen(emitted, layer, seq, &cur) else {
                continue;
            };
            hops += 1;
            if hops > MAX_HOPS {
                return Err(Unresolvable::Loop { link: cur });
            }
            let link = cur.clone();
            cur.truncate(at);
            if target.first() == Some(&b'/') {
                cur.clear();
            }
            // A target that climbs above the root is refused, not clamped:
            // no real image needs it, and it is how escapes are written.
            let mut depth = cur.split(|b| *b == b'/').filter(|c| !c.is_empty()).count();
            for c in components(target) {
                if c == b".." {
                    if depth == 0 {
                        return Err(Unresolvable::AboveRoot { link });
                    }
                    depth -= 1;
                } else {
                    depth += 1;
                }
            }
            todo.extend(components(target).rev().map(<[u8]>::to_vec));
        }
        if !cur.is_empty() {
            cur.push(b'/');
        }
        cur.extend_from_slice(name);
        Ok(cur)
    }
}

/// The non-empty components of a path, `.` dropped (`..` kept).
fn components(path: &[u8]) -> impl DoubleEndedIterator<Item = &[u8]> {
    path.split(|b| *b == b'/')
        .filter(|c| !c.is_empty() && *c != b".")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(d: &Defs, layer: usize, seq: u64, p: &str) -> Result<String, Unresolvable> {
        d.resolve(&|_| None, layer, seq, p.as_bytes())
            .map(|v| String::from_utf8(v).unwrap())
    }

    #[test]
    fn a_file_in_between_hides_a_lower_symlink() {
        let mut d = Defs::default();
        d.symlink(b"c", 2, 1, b"/d");
        assert_eq!(r(&d, 0, 9, "c/z").unwrap(), "d/z");
        d.other(b"c", 1, 5);
        assert_eq!(r(&d, 0, 9, "c/z").unwrap(), "c/z");
        // An emitted file, as the flattener reports it.
        let mut d = Defs::default();
        d.symlink(b"c", 2, 1, b"/d");
        let emitted = |p: &[u8]| (p == b"c").then_some((1, 5));
        assert_eq!(d.resolve(&emitted, 0, 9, b"c/z").unwrap(), b"c/z");
        // Later in the same layer, the file does not count yet.
        let emitted = |p: &[u8]| (p == b"c").then_some((0, 12));
        assert_eq!(d.resolve(&emitted, 0, 9, b"c/z").unwrap(), b"d/z");
    }

    #[test]
    fn lower_symlinked_parent_is_followed() {
        let mut d = Defs::default();
        d.symlink(b"lib", 1, 1, b"usr/lib");
        d.dir(b"usr", 1, 2);
        d.dir(b"usr/lib", 1, 3);
        assert_eq!(r(&d, 0, 10, "lib/newfile").unwrap(), "usr/lib/newfile");
        // The symlink itself is replaced, not followed.
        assert_eq!(r(&d, 0, 10, "lib").unwrap(), "lib");
        // Absolute targets start at the root.
        d.symlink(b"var/run", 1, 4, b"/run");
        assert_eq!(r(&d, 0, 10, "var/run/x.pid").unwrap(), "run/x.pid");
        // Chains and `..` inside the root.
        d.symlink(b"lib64", 1, 5, b"usr/../usr/lib64");
        assert_eq!(r(&d, 0, 10, "lib64/ld.so").unwrap(), "usr/lib64/ld.so");
    }

    #[test]
    fn a_symlink_is_seen_only_below_or_earlier_in_the_same_layer() {
        let mut d = Defs::default();
        d.symlink(b"l", 1, 5, b"t");
        // An upper layer's symlink does not redirect a lower entry.
        d.symlink(b"up", 0, 1, b"t");
        assert_eq!(r(&d, 1, 9, "up/x").unwrap(), "up/x");
        // Same layer: only what came before.
        assert_eq!(r(&d, 1, 4, "l/x").unwrap(), "l/x");
        assert_eq!(r(&d, 1, 6, "l/x").unwrap(), "t/x");
        // A directory of a layer in between replaces the symlink.
        d.dir(b"l", 2, 1);
        assert_eq!(r(&d, 0, 9, "l/x").unwrap(), "t/x");
        d.dir(b"l", 0, 3);
        assert_eq!(r(&d, 0, 9, "l/x").unwrap(), "l/x");
    }

    #[test]
    fn whiteouts_in_between_hide_a_lower_symlink() {
        let mut d = Defs::default();
        d.symlink(b"l", 2, 1, b"t");
        d.whiteout(b"l", 1);
        assert_eq!(r(&d, 0, 9, "l/x").unwrap(), "l/x");
        assert_eq!(r(&d, 1, 9, "l/x").unwrap(), "l/x");
        let mut d = Defs::default();
        d.symlink(b"o/l", 2, 1, b"/t");
        d.opaque(b"o", 1);
        assert_eq!(r(&d, 0, 9, "o/l/x").unwrap(), "o/l/x");
        // A whiteout above the entry's own layer does not matter.
        let mut d = Defs::default();
        d.symlink(b"l", 2, 1, b"t");
        d.whiteout(b"l", 0);
        assert_eq!(r(&d, 1, 9, "l/x").unwrap(), "t/x");
    }

    #[test]
    fn climbing_above_the_root_and_loops_are_refused() {
        let mut d = Defs::default();
        d.symlink(b"a/up", 1, 1, b"../../tmp");
        assert_eq!(
            r(&d, 0, 9, "a/up/x"),
            Err(Unresolvable::AboveRoot {
                link: b"a/up".to_vec()
            })
        );
        d.symlink(b"a/ok", 1, 2, b"../tmp");
        assert_eq!(r(&d, 0, 9, "a/ok/x").unwrap(), "tmp/x");
        d.symlink(b"p", 1, 3, b"q");
        d.symlink(b"q", 1, 4, b"p");
        assert!(matches!(r(&d, 0, 9, "p/x"), Err(Unresolvable::Loop { .. })));
    }
}
