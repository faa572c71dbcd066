//! The writer against squashfs-tools: an image made by mksquashfs,
//! amended here, must unpack with unsquashfs (an independent reader) to
//! the tree the same changes make on disk, and read back the same with
//! berth's reader.

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::{symlink, MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::Command;

use super::*;

/// Bytes that do not compress (xorshift).
fn noise(n: usize, seed: u32) -> Vec<u8> {
    let mut x = (u64::from(seed) + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

/// Whether squashfs-tools is here (CI must have it).
fn have_tools() -> bool {
    let ok = ["mksquashfs", "unsquashfs"].iter().all(|t| {
        Command::new(t)
            .arg("-version")
            .output()
            .is_ok_and(|o| o.status.success() || !o.stdout.is_empty())
    });
    if !ok && std::env::var_os("CI").is_some() {
        panic!("squashfs-tools (mksquashfs, unsquashfs) missing under CI");
    }
    ok
}

/// Runs `cmd`, which must succeed.
fn run(cmd: &mut Command) {
    let out = cmd.output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{cmd:?}: {err}");
}

fn make_tree(root: &Path) {
    let w = |p: &str, data: &[u8]| {
        let p = root.join(p);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(p, data).unwrap();
    };
    for (i, n) in [0usize, 1, 4097, 131_072, 131_073, 300_000]
        .iter()
        .enumerate()
    {
        w(&format!("sizes/noise-{n}"), &noise(*n, i as u32));
        w(
            &format!("sizes/text-{n}"),
            &b"squashfs ".repeat(n / 9 + 1)[..*n],
        );
    }
    w(
        "sparse-ish",
        &[vec![1u8; 1000], vec![0u8; 400_000], vec![2u8; 1000]].concat(),
    );
    w("links/a", b"linked");
    fs::hard_link(root.join("links/a"), root.join("links/b")).unwrap();
    symlink("../sizes/noise-1", root.join("links/sym")).unwrap();
    rustix::fs::mknodat(
        rustix::fs::CWD,
        root.join("links/fifo"),
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o640),
        0,
    )
    .unwrap();
    // A directory whose listing spans several metadata blocks.
    for i in 0..3000 {
        w(&format!("big/entry-with-a-longish-name-{i:05}"), b"x");
    }
    w("deep/a/b/c/d/file", b"deep");
    fs::set_permissions(root.join("deep/a"), fs::Permissions::from_mode(0o700)).unwrap();
    fs::create_dir_all(root.join("empty")).unwrap();
}

/// The same changes as [`amend`], made on disk.
fn change_tree(root: &Path) {
    fs::remove_file(root.join("big/entry-with-a-longish-name-01234")).unwrap();
    fs::remove_dir_all(root.join("deep/a/b")).unwrap();
    fs::write(root.join("sizes/noise-1"), noise(200_000, 9)).unwrap();
    fs::create_dir_all(root.join("new/dir")).unwrap();
    fs::write(root.join("new/dir/file"), noise(262_144 + 17, 3)).unwrap();
    fs::hard_link(root.join("new/dir/file"), root.join("new/link")).unwrap();
    fs::remove_file(root.join("links/b")).unwrap();
    fs::remove_file(root.join("sizes/noise-300000")).unwrap();
    symlink("/nowhere", root.join("links/b")).unwrap();
}

fn attrs(perm: u16) -> Attrs {
    Attrs {
        perm,
        uid: rustix::process::getuid().as_raw(),
        gid: rustix::process::getgid().as_raw(),
        mtime: 1_700_000_000,
        xattrs: Default::default(),
    }
}

fn amend(tree: &mut Tree, a: &mut Appender) {
    let root = tree.root();
    let dir = |tree: &Tree, path: &[&str]| {
        path.iter()
            .fold(root, |d, n| tree.child(d, n.as_bytes()).unwrap())
    };
    let big = dir(tree, &["big"]);
    tree.entries_mut(big)
        .unwrap()
        .remove(&b"entry-with-a-longish-name-01234"[..]);
    let a_dir = dir(tree, &["deep", "a"]);
    tree.entries_mut(a_dir).unwrap().remove(&b"b"[..]);
    let mut new_file = |tree: &mut Tree, data: Vec<u8>| {
        let f = a.add_file(&mut &data[..], data.len() as u64).unwrap();
        tree.add(Node {
            attrs: attrs(0o644),
            content: Content::File(f),
            layer: 1,
        })
    };
    let file = new_file(tree, noise(200_000, 9));
    let sizes = dir(tree, &["sizes"]);
    let entries = tree.entries_mut(sizes).unwrap();
    entries.insert(b"noise-1"[..].into(), file);
    entries.remove(&b"noise-300000"[..]);
    let file = new_file(tree, noise(262_144 + 17, 3));
    let new = tree.add(Node {
        attrs: attrs(0o755),
        content: Content::Dir(BTreeMap::new()),
        layer: 1,
    });
    let sub = tree.add(Node {
        attrs: attrs(0o755),
        content: Content::Dir(BTreeMap::new()),
        layer: 1,
    });
    tree.entries_mut(sub)
        .unwrap()
        .insert(b"file"[..].into(), file);
    tree.entries_mut(new)
        .unwrap()
        .insert(b"dir"[..].into(), sub);
    tree.entries_mut(new)
        .unwrap()
        .insert(b"link"[..].into(), file);
    tree.entries_mut(root)
        .unwrap()
        .insert(b"new"[..].into(), new);
    let sym = tree.add(Node {
        attrs: attrs(0o777),
        content: Content::Symlink(b"/nowhere".to_vec()),
        layer: 1,
    });
    let links = dir(tree, &["links"]);
    tree.entries_mut(links)
        .unwrap()
        .insert(b"b"[..].into(), sym);
}

/// Every entry: kind and permissions, size, content, link target, links.
fn walk(root: &Path) -> BTreeMap<String, (u32, u64, Vec<u8>, u64)> {
    let mut out = BTreeMap::new();
    let mut todo = vec![root.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            let m = fs::symlink_metadata(&p).unwrap();
            let content = if m.is_file() {
                fs::read(&p).unwrap()
            } else if m.file_type().is_symlink() {
                fs::read_link(&p)
                    .unwrap()
                    .into_os_string()
                    .into_encoded_bytes()
            } else {
                Vec::new()
            };
            if m.is_dir() {
                todo.push(p.clone());
            }
            let size = if m.is_dir() { 0 } else { m.size() };
            let nlink = if m.is_dir() { 0 } else { m.nlink() };
            let rel = p.strip_prefix(root).unwrap().display().to_string();
            out.insert(rel, (m.mode(), size, content, nlink));
        }
    }
    out
}

#[test]
fn an_amended_image_unpacks_to_the_changed_tree() {
    if !have_tools() {
        eprintln!("skipped: squashfs-tools not installed");
        return;
    }
    let work = tempfile::tempdir().unwrap();
    let src = work.path().join("src");
    make_tree(&src);
    for comp in ["zstd", "gzip", "lz4"] {
        let img = work.path().join(format!("{comp}.sqfs"));
        run(Command::new("mksquashfs").arg(&src).arg(&img).args([
            "-noappend",
            "-quiet",
            "-no-progress",
            "-comp",
            comp,
        ]));
        let file = fs::File::open(&img).unwrap();
        let image = Image::open(file.try_clone().unwrap(), 0).unwrap();
        let mut tree = Tree::from_image(&image).unwrap();
        assert_eq!(tree.unused_image_data(), 0);
        let new = work.path().join(format!("{comp}-amended.sqfs"));
        let mut a = Appender::start(&image, &file, fs::File::create(&new).unwrap(), None).unwrap();
        amend(&mut tree, &mut a);
        assert!(tree.unused_image_data() > 100_000, "{comp}");
        let used = a.finish(&tree).unwrap();
        assert!(used <= fs::metadata(&new).unwrap().len());
        // squashfs-tools reads it.
        let dest = work.path().join(format!("{comp}-unpacked"));
        run(Command::new("unsquashfs")
            .args(["-no-progress", "-no-xattrs", "-d"])
            .arg(&dest)
            .arg(&new));
        let expected = work.path().join(format!("{comp}-expected"));
        run(Command::new("cp").arg("-a").arg(&src).arg(&expected));
        change_tree(&expected);
        let (got, want) = (walk(&dest), walk(&expected));
        assert_eq!(got.len(), want.len(), "{comp}: entries");
        for (path, w) in &want {
            assert_eq!(got.get(path), Some(w), "{comp}: {path}");
        }
        // And berth's reader: the big directory's lookups (its index).
        let image = Image::open(fs::File::open(&new).unwrap(), 0).unwrap();
        for i in [0, 1233, 1234, 1235, 2999] {
            let name = format!("/big/entry-with-a-longish-name-{i:05}");
            assert_eq!(image.resolve(&name).unwrap().is_some(), i != 1234, "{name}");
        }
        let (_, root) = image.resolve("/").unwrap().unwrap();
        assert_eq!(root.nlink, 2 + 6, "{comp}: root links");
    }
}

/// Listings split into runs (inode numbers more than 32767 apart, many
/// inode blocks) and their index, read back as the kernel reads it: each
/// index entry points at a run whose first name is the entry's; an image
/// without fragments gains some.
#[test]
fn listings_split_their_runs_and_index_them() {
    if !have_tools() {
        eprintln!("skipped: squashfs-tools not installed");
        return;
    }
    let work = tempfile::tempdir().unwrap();
    let src = work.path().join("src");
    fs::create_dir_all(&src).unwrap();
    fs::write(src.join("blocks"), noise(300_000, 1)).unwrap();
    let img = work.path().join("img.sqfs");
    run(Command::new("mksquashfs").arg(&src).arg(&img).args([
        "-noappend",
        "-quiet",
        "-no-progress",
        "-no-fragments",
    ]));
    let file = fs::File::open(&img).unwrap();
    let image = Image::open(file.try_clone().unwrap(), 0).unwrap();
    assert_eq!(image.superblock().frag_count, 0);
    let mut tree = Tree::from_image(&image).unwrap();
    let new = work.path().join("new.sqfs");
    let mut a = Appender::start(&image, &file, fs::File::create(&new).unwrap(), None).unwrap();
    let mut add = |tree: &mut Tree, dir: NodeId, name: String, data: &[u8]| {
        let f = a.add_file(&mut &data[..], data.len() as u64).unwrap();
        let id = tree.add(Node {
            attrs: attrs(0o644),
            content: Content::File(f),
            layer: 1,
        });
        tree.entries_mut(dir)
            .unwrap()
            .insert(name.into_bytes().into(), id);
    };
    let root = tree.root();
    add(&mut tree, root, "a".into(), b"tiny");
    let b = tree.add(Node {
        attrs: attrs(0o755),
        content: Content::Dir(BTreeMap::new()),
        layer: 1,
    });
    tree.entries_mut(root).unwrap().insert(b"b"[..].into(), b);
    for i in 0..40_000 {
        add(&mut tree, b, format!("file-{i:05}"), b"");
    }
    a.finish(&tree).unwrap();
    let listed = Command::new("unsquashfs")
        .arg("-l")
        .arg(&new)
        .output()
        .unwrap();
    assert!(listed.status.success());
    assert_eq!(
        String::from_utf8_lossy(&listed.stdout)
            .lines()
            .filter(|l| l.contains("/b/file-"))
            .count(),
        40_000
    );
    let image = Image::open(fs::File::open(&new).unwrap(), 0).unwrap();
    assert_eq!(image.superblock().frag_count, 1);
    assert_eq!(image.read_path("/a", 10).unwrap().unwrap(), b"tiny");
    assert!(image.resolve("/b/file-39999").unwrap().is_some());
    // The index of /b, decoded as fs/squashfs/namei.c does.
    let sb = image.superblock().clone();
    let (r, _) = image.resolve("/b").unwrap().unwrap();
    let mut c = image
        .cursor(sb.inode_table + (r >> 16), (r & 0xffff) as usize)
        .unwrap();
    assert_eq!(c.u16().unwrap(), 8, "an extended directory");
    c.bytes(14).unwrap();
    let (_nlink, _size, _start, _parent) = (c.u32(), c.u32(), c.u32(), c.u32());
    let count = c.u16().unwrap();
    let dir_offset = c.u16().unwrap();
    c.u32().unwrap();
    assert!(count > 50, "{count} index entries");
    let mut last = Vec::new();
    for _ in 0..count {
        let (index, block, size) = (c.u32().unwrap(), c.u32().unwrap(), c.u32().unwrap());
        let name = c.bytes(size as usize + 1).unwrap();
        assert!(name > last);
        last = name.clone();
        let at = (index as usize + dir_offset as usize) % 8192;
        let mut d = image.cursor(sb.dir_table + u64::from(block), at).unwrap();
        let (_count, _start, _number) = (d.u32(), d.u32(), d.u32());
        let (_off, _delta, _kind) = (d.u16(), d.u16(), d.u16());
        let len = d.u16().unwrap() as usize + 1;
        assert_eq!(d.bytes(len).unwrap(), name);
    }
}
