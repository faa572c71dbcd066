//! Unit and property tests of the flattener against a reference model:
//! the test layers and the model here, examples in [`cases`], generated
//! layer stacks in [`properties`].

use std::collections::BTreeMap;
use std::io::Read;

use super::*;

/// One entry of a test layer.
#[derive(Debug, Clone)]
enum E {
    Dir(&'static str),
    File(&'static str, &'static str),
    Sym(&'static str, &'static str),
    Hard(&'static str, &'static str),
    Dev(&'static str),
}

fn layer(entries: &[E]) -> Vec<u8> {
    let owned: Vec<OwnedE> = entries.iter().map(OwnedE::from).collect();
    layer_owned(&owned)
}

#[derive(Debug, Clone, PartialEq)]
enum OwnedE {
    Dir(String),
    File(String, String),
    Sym(String, String),
    Hard(String, String),
    Dev(String),
}

impl From<&E> for OwnedE {
    fn from(e: &E) -> Self {
        match e {
            E::Dir(p) => OwnedE::Dir(p.to_string()),
            E::File(p, c) => OwnedE::File(p.to_string(), c.to_string()),
            E::Sym(p, t) => OwnedE::Sym(p.to_string(), t.to_string()),
            E::Hard(p, t) => OwnedE::Hard(p.to_string(), t.to_string()),
            E::Dev(p) => OwnedE::Dev(p.to_string()),
        }
    }
}

/// Writes raw names (no normalisation by the tar crate) so hostile names
/// reach the flattener as written.
fn raw_header(name: &str, kind: EntryType, size: u64, link: &str) -> Header {
    let mut h = Header::new_gnu();
    h.set_entry_type(kind);
    h.set_mode(if kind == EntryType::Directory {
        0o755
    } else {
        0o644
    });
    h.set_size(size);
    h.set_mtime(1_600_000_000);
    {
        let old = h.as_old_mut();
        old.name[..name.len()].copy_from_slice(name.as_bytes());
        old.linkname[..link.len()].copy_from_slice(link.as_bytes());
    }
    h.set_cksum();
    h
}

/// The flattened output of one layer given as tar bytes.
fn flatten_raw(layer: &[u8]) -> Vec<u8> {
    let dir = tempfile::tempdir().unwrap();
    let mut f = Flattener::new(Vec::new(), dir.path());
    f.add_layer("l", layer).unwrap();
    f.finish().unwrap().0
}

fn layer_owned(entries: &[OwnedE]) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    for e in entries {
        let (h, data): (Header, &[u8]) = match e {
            OwnedE::Dir(p) => (raw_header(p, EntryType::Directory, 0, ""), b""),
            OwnedE::File(p, c) => (
                raw_header(p, EntryType::Regular, c.len() as u64, ""),
                c.as_bytes(),
            ),
            OwnedE::Sym(p, t) => (raw_header(p, EntryType::Symlink, 0, t), b""),
            OwnedE::Hard(p, t) => (raw_header(p, EntryType::Link, 0, t), b""),
            OwnedE::Dev(p) => (raw_header(p, EntryType::Char, 0, ""), b""),
        };
        b.append(&h, data).unwrap();
    }
    b.into_inner().unwrap()
}

/// What the flattened tree holds at a path.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Node {
    Dir,
    File(String),
    Sym(String),
}

/// Flattens layers given bottom-up (as an image lists them) and returns the
/// tree, resolving hard links to their content.
fn flatten(layers_bottom_up: &[Vec<u8>]) -> Result<(BTreeMap<String, Node>, FlattenStats)> {
    flatten_with(layers_bottom_up, true)
}

/// As [`flatten`]; `count_known` says whether the flattener is told the
/// number of layers (the pipeline tells it; without, nothing changes but
/// the bottom layer's entries may wait too).
fn flatten_with(
    layers_bottom_up: &[Vec<u8>],
    count_known: bool,
) -> Result<(BTreeMap<String, Node>, FlattenStats)> {
    let dir = tempfile::tempdir().unwrap();
    let mut f = Flattener::new(Vec::new(), dir.path());
    if count_known {
        f.expect_layers(layers_bottom_up.len());
    }
    for (i, l) in layers_bottom_up.iter().enumerate().rev() {
        f.add_layer(&format!("layer{i}"), &l[..])?;
    }
    let (out, stats) = f.finish()?;
    let mut tree = BTreeMap::new();
    let mut links = Vec::new();
    let mut ar = tar::Archive::new(&out[..]);
    for e in ar.entries().unwrap() {
        let mut e = e.unwrap();
        let p = String::from_utf8(e.path_bytes().into_owned()).unwrap();
        assert!(
            !p.starts_with('/') && !p.split('/').any(|c| c == ".."),
            "emitted {p:?} outside the root"
        );
        let p = p.trim_start_matches("./").trim_end_matches('/').to_string();
        let node = match e.header().entry_type() {
            EntryType::Directory => Node::Dir,
            EntryType::Regular => {
                let mut s = String::new();
                e.read_to_string(&mut s).unwrap();
                Node::File(s)
            }
            EntryType::Symlink => {
                Node::Sym(String::from_utf8(e.link_name_bytes().unwrap().into_owned()).unwrap())
            }
            EntryType::Link => {
                links.push((
                    p,
                    String::from_utf8(e.link_name_bytes().unwrap().into_owned()).unwrap(),
                ));
                continue;
            }
            t => panic!("unexpected {t:?}"),
        };
        assert!(tree.insert(p.clone(), node).is_none(), "duplicate {p}");
    }
    for (p, t) in links {
        let n = tree
            .get(&t)
            .cloned()
            .unwrap_or_else(|| panic!("dangling link {p} -> {t}"));
        tree.insert(p, n);
    }
    // Implicit parents.
    let keys: Vec<String> = tree.keys().cloned().collect();
    for k in keys {
        let mut acc = String::new();
        for c in k.split('/').collect::<Vec<_>>().split_last().unwrap().1 {
            if !acc.is_empty() {
                acc.push('/');
            }
            acc.push_str(c);
            tree.entry(acc.clone()).or_insert(Node::Dir);
        }
    }
    tree.remove("");
    Ok((tree, stats))
}

/// Where an extractor creates `p` in `tree`: its parents resolved through
/// the tree's symlinks inside the root; `None` when a symlink climbs above
/// the root or loops.
fn model_resolve(tree: &BTreeMap<String, Node>, p: &str) -> Option<String> {
    let (parent, name) = p.rsplit_once('/').unwrap_or(("", p));
    let parts = |s: &str| -> Vec<String> {
        s.split('/')
            .filter(|c| !c.is_empty() && *c != ".")
            .map(String::from)
            .collect()
    };
    let mut todo: Vec<String> = parts(parent).into_iter().rev().collect();
    let mut cur: Vec<String> = Vec::new();
    let mut hops = 0;
    while let Some(c) = todo.pop() {
        if c == ".." {
            cur.pop();
            continue;
        }
        cur.push(c);
        if let Some(Node::Sym(t)) = tree.get(&cur.join("/")) {
            hops += 1;
            if hops > 40 {
                return None;
            }
            cur.pop();
            if t.starts_with('/') {
                cur.clear();
            }
            let mut depth = cur.len() as i64;
            for c in parts(t) {
                depth += if c == ".." { -1 } else { 1 };
                if depth < 0 {
                    return None;
                }
            }
            todo.extend(parts(t).into_iter().rev());
        }
    }
    cur.push(name.to_string());
    Some(cur.join("/"))
}

/// Why the model has no tree for some layers.
#[derive(Debug, PartialEq)]
enum ModelRefusal {
    /// A symlinked parent climbs above the root: berth must refuse.
    Escape,
    /// A parent is a file: an extractor fails (ENOTDIR); berth refuses or,
    /// where the entry is deleted anyway, passes over it.
    ParentNotDir,
}

/// The reference model: apply layers bottom-up to a map, as an extractor
/// would (parents through symlinks, inside the root).
fn model(layers_bottom_up: &[Vec<OwnedE>]) -> BTreeMap<String, Node> {
    model_checked(layers_bottom_up).expect("the model refuses these layers")
}

fn model_checked(
    layers_bottom_up: &[Vec<OwnedE>],
) -> std::result::Result<BTreeMap<String, Node>, ModelRefusal> {
    let mut tree: BTreeMap<String, Node> = BTreeMap::new();
    let remove_tree = |tree: &mut BTreeMap<String, Node>, p: &str| {
        tree.retain(|k, _| k != p && !k.starts_with(&format!("{p}/")));
    };
    for l in layers_bottom_up {
        // Whiteouts first (they apply to lower layers only).
        for e in l {
            if let OwnedE::File(p, _) = e {
                let (parent, name) = p.rsplit_once('/').unwrap_or(("", p));
                if name == ".wh..wh..opq" {
                    let prefix = format!("{parent}/");
                    tree.retain(|k, _| !k.starts_with(&prefix));
                } else if let Some(t) = name.strip_prefix(".wh.") {
                    let full = if parent.is_empty() {
                        t.to_string()
                    } else {
                        format!("{parent}/{t}")
                    };
                    remove_tree(&mut tree, &full);
                }
            }
        }
        for e in l {
            let (p, node) = match e {
                OwnedE::File(p, _) if p.rsplit('/').next().unwrap().starts_with(".wh.") => continue,
                OwnedE::Dir(p) => (p, Node::Dir),
                OwnedE::File(p, c) => (p, Node::File(c.clone())),
                OwnedE::Sym(p, t) => (p, Node::Sym(t.clone())),
                OwnedE::Hard(p, t) => (p, tree.get(t).cloned().unwrap()),
                OwnedE::Dev(_) => continue,
            };
            let p = &model_resolve(&tree, p).ok_or(ModelRefusal::Escape)?;
            if node != Node::Dir || tree.get(p) != Some(&Node::Dir) {
                remove_tree(&mut tree, p);
            }
            let mut acc = String::new();
            for c in p.split('/').collect::<Vec<_>>().split_last().unwrap().1 {
                if !acc.is_empty() {
                    acc.push('/');
                }
                acc.push_str(c);
                if matches!(tree.get(&acc), Some(Node::File(_))) {
                    return Err(ModelRefusal::ParentNotDir);
                }
                tree.insert(acc.clone(), Node::Dir);
            }
            tree.insert(p.clone(), node);
        }
    }
    Ok(tree)
}

fn check_against_model(layers: &[&[E]]) {
    let owned: Vec<Vec<OwnedE>> = layers
        .iter()
        .map(|l| l.iter().map(OwnedE::from).collect())
        .collect();
    let tars: Vec<Vec<u8>> = owned.iter().map(|l| layer_owned(l)).collect();
    let (got, _) = flatten(&tars).unwrap();
    assert_eq!(got, model(&owned));
}

mod cases;
mod properties;
