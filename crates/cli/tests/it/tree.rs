//! A snapshot of a directory tree, to compare berth's squashfs contents with
//! the rootfs `umoci unpack` makes of the same image.

use std::collections::{BTreeMap, HashMap};
use std::fs;
use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use sha2::{Digest, Sha256};

/// What one path holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    pub kind: &'static str,
    pub mode: u32,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    pub size: u64,
    pub sha256: String,
    pub target: String,
    pub mtime: Option<i64>,
    /// Other names of the same inode (hard links), sorted.
    pub links: Vec<String>,
}

pub fn snapshot(root: &Path, with_owners: bool, skip: &[&str]) -> BTreeMap<String, Node> {
    let mut out = BTreeMap::new();
    let mut inodes: HashMap<u64, Vec<String>> = HashMap::new();
    walk(root, root, with_owners, &mut out, &mut inodes);
    for s in skip {
        out.remove(*s);
    }
    for names in inodes.values() {
        if names.len() > 1 {
            for n in names {
                if let Some(node) = out.get_mut(n) {
                    let mut others: Vec<String> =
                        names.iter().filter(|x| *x != n).cloned().collect();
                    others.sort();
                    node.links = others;
                }
            }
        }
    }
    out
}

fn walk(
    root: &Path,
    dir: &Path,
    owners: bool,
    out: &mut BTreeMap<String, Node>,
    inodes: &mut HashMap<u64, Vec<String>>,
) {
    let mut entries: Vec<_> = fs::read_dir(dir).unwrap().flatten().collect();
    entries.sort_by_key(|e| e.file_name());
    for e in entries {
        let p = e.path();
        let rel = p.strip_prefix(root).unwrap().to_string_lossy().into_owned();
        let m = fs::symlink_metadata(&p).unwrap();
        let ft = m.file_type();
        let (kind, sha256, target, mtime) = if ft.is_dir() {
            ("dir", String::new(), String::new(), None)
        } else if ft.is_symlink() {
            (
                "symlink",
                String::new(),
                fs::read_link(&p).unwrap().to_string_lossy().into_owned(),
                None,
            )
        } else if ft.is_file() {
            let mut h = Sha256::new();
            let mut f = fs::File::open(&p).unwrap();
            let mut buf = vec![0u8; 65536];
            loop {
                let n = f.read(&mut buf).unwrap();
                if n == 0 {
                    break;
                }
                h.update(&buf[..n]);
            }
            if m.nlink() > 1 {
                inodes.entry(m.ino()).or_default().push(rel.clone());
            }
            (
                "file",
                h.finalize()
                    .iter()
                    .map(|b| format!("{b:02x}"))
                    .collect::<String>(),
                String::new(),
                Some(m.mtime()),
            )
        } else {
            ("other", String::new(), String::new(), None)
        };
        out.insert(
            rel,
            Node {
                kind,
                mode: m.mode() & 0o7777,
                uid: owners.then_some(m.uid()),
                gid: owners.then_some(m.gid()),
                size: if ft.is_file() { m.len() } else { 0 },
                sha256,
                target,
                mtime,
                links: vec![],
            },
        );
        if ft.is_dir() {
            walk(root, &p, owners, out, inodes);
        }
    }
}

/// Asserts two snapshots are equal, listing every difference.
pub fn assert_same(got: &BTreeMap<String, Node>, want: &BTreeMap<String, Node>, what: &str) {
    let mut diffs = Vec::new();
    for k in got
        .keys()
        .chain(want.keys())
        .collect::<std::collections::BTreeSet<_>>()
    {
        if got.get(k) != want.get(k) {
            diffs.push(format!(
                "{k}:\n   berth: {:?}\n  oracle: {:?}",
                got.get(k),
                want.get(k)
            ));
        }
    }
    assert!(
        diffs.is_empty(),
        "{what}: {} differences:\n{}",
        diffs.len(),
        diffs.join("\n")
    );
}
