//! berth's squashfs server against the kernel's squashfs driver: the same
//! image file, loop-mounted by the kernel and served by `berth
//! __squashfs`, must show the same tree (names, kinds, modes, owners,
//! sizes, mtimes, inode numbers and so hard-link groups, link counts,
//! device numbers, link targets, contents, xattrs), for images made by
//! mksquashfs with every compressor and block sizes from 4 KiB to 1 MiB,
//! and by tar2sqfs. A corrupted image gives errors, never a hang or a dead
//! server.

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io::Read;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{symlink, FileExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};

use crate::harness::*;

/// What one path holds, as stat, readlink, read and listxattr see it.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Entry {
    pub(crate) mode: u32,
    pub(crate) uid: u32,
    pub(crate) gid: u32,
    pub(crate) size: u64,
    pub(crate) mtime: i64,
    pub(crate) ino: u64,
    pub(crate) nlink: u64,
    pub(crate) rdev: u64,
    pub(crate) target: String,
    pub(crate) sha256: String,
    pub(crate) xattrs: Vec<(String, Vec<u8>)>,
}

pub(crate) fn snapshot(root: &Path) -> BTreeMap<String, Entry> {
    let mut out = BTreeMap::new();
    let mut dirs = vec![root.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for e in fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            let m = fs::symlink_metadata(&p).unwrap();
            let ft = m.file_type();
            if ft.is_dir() {
                dirs.push(p.clone());
            }
            let sha256 = if ft.is_file() {
                let mut h = Sha256::new();
                let mut f = File::open(&p).unwrap();
                let mut buf = vec![0; 1 << 16];
                loop {
                    let n = f.read(&mut buf).unwrap();
                    if n == 0 {
                        break;
                    }
                    h.update(&buf[..n]);
                }
                h.finalize()
                    .iter()
                    .map(|b| format!("{b:02x}"))
                    .collect::<String>()
            } else {
                String::new()
            };
            let target = if ft.is_symlink() {
                fs::read_link(&p).unwrap().to_string_lossy().into_owned()
            } else {
                String::new()
            };
            let mut names = vec![0u8; 64 * 1024];
            let n = rustix::fs::llistxattr(&p, &mut names).unwrap_or(0);
            let mut xattrs: Vec<(String, Vec<u8>)> = names[..n]
                .split(|&b| b == 0)
                .filter(|s| !s.is_empty())
                .map(|name| {
                    let name = String::from_utf8_lossy(name).into_owned();
                    let mut v = vec![0u8; 64 * 1024];
                    let len = rustix::fs::lgetxattr(&p, name.as_str(), &mut v).unwrap();
                    v.truncate(len);
                    (name, v)
                })
                .collect();
            xattrs.sort();
            let rel = p.strip_prefix(root).unwrap().to_string_lossy().into_owned();
            out.insert(
                rel,
                Entry {
                    mode: m.mode(),
                    uid: m.uid(),
                    gid: m.gid(),
                    size: m.size(),
                    mtime: m.mtime(),
                    ino: m.ino(),
                    nlink: m.nlink(),
                    rdev: m.rdev(),
                    target,
                    sha256,
                    xattrs,
                },
            );
        }
    }
    out
}

/// A tree with everything squashfs stores.
pub(crate) fn make_tree(root: &Path) {
    let w = |p: &str, data: &[u8]| {
        let p = root.join(p);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(p, data).unwrap();
    };
    // Sizes around every block size and fragment boundary.
    let noise: Vec<u8> = (0..3_000_000u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    for n in [
        0, 1, 100, 4095, 4096, 4097, 65_535, 65_536, 131_072, 131_073, 1_048_577, 3_000_000,
    ] {
        w(&format!("sizes/noise-{n}"), &noise[..n]);
        w(
            &format!("sizes/text-{n}"),
            &b"squashfs ".repeat(n / 9 + 1)[..n],
        );
    }
    // A sparse file: data, a 3 MiB hole, data.
    let f = File::create(root.join("sparse")).unwrap();
    f.write_all_at(b"start", 0).unwrap();
    f.write_all_at(b"end", 3 << 20).unwrap();
    // A large directory (its index) and deep nesting.
    for i in 0..3000 {
        w(&format!("big/entry-{i:05}-{}", "x".repeat(i % 40)), b"");
    }
    w(
        &format!(
            "{}/leaf",
            (0..30)
                .map(|i| format!("d{i}"))
                .collect::<Vec<_>>()
                .join("/")
        ),
        b"deep",
    );
    // Links.
    w("links/target", b"linked");
    fs::hard_link(root.join("links/target"), root.join("links/hard1")).unwrap();
    fs::hard_link(root.join("links/target"), root.join("links/hard2")).unwrap();
    symlink("target", root.join("links/soft")).unwrap();
    symlink("x".repeat(1000), root.join("links/long")).unwrap();
    symlink("/nowhere/at/all", root.join("links/dangling")).unwrap();
    // Special files.
    fs::create_dir(root.join("dev")).unwrap();
    for (name, kind, major, minor) in [
        ("null", rustix::fs::FileType::CharacterDevice, 1, 3),
        ("loop", rustix::fs::FileType::BlockDevice, 7, 300),
    ] {
        rustix::fs::mknodat(
            rustix::fs::CWD,
            root.join("dev").join(name),
            kind,
            rustix::fs::Mode::from_raw_mode(0o640),
            rustix::fs::makedev(major, minor),
        )
        .unwrap();
    }
    rustix::fs::mknodat(
        rustix::fs::CWD,
        root.join("dev/fifo"),
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o600),
        0,
    )
    .unwrap();
    drop(std::os::unix::net::UnixListener::bind(root.join("dev/socket")).unwrap());
    // Modes, owners, xattrs, times.
    w("modes/setuid", b"s");
    fs::set_permissions(
        root.join("modes/setuid"),
        fs::Permissions::from_mode(0o4755),
    )
    .unwrap();
    fs::create_dir(root.join("modes/sticky")).unwrap();
    fs::set_permissions(
        root.join("modes/sticky"),
        fs::Permissions::from_mode(0o1777),
    )
    .unwrap();
    w("modes/none", b"n");
    fs::set_permissions(root.join("modes/none"), fs::Permissions::from_mode(0o000)).unwrap();
    w("owners/a", b"a");
    rustix::fs::chown(
        root.join("owners/a"),
        Some(rustix::fs::Uid::from_raw(1234)),
        Some(rustix::fs::Gid::from_raw(5678)),
    )
    .unwrap();
    w("xattrs/file", b"x");
    for (k, v) in [
        ("user.one", &b"1"[..]),
        ("user.big", &[7u8; 3000][..]),
        ("user.empty", b""),
    ] {
        rustix::fs::lsetxattr(
            root.join("xattrs/file"),
            k,
            v,
            rustix::fs::XattrFlags::empty(),
        )
        .unwrap();
    }
    let old = rustix::fs::Timestamps {
        last_access: rustix::fs::Timespec {
            tv_sec: 1_000_000_000,
            tv_nsec: 0,
        },
        last_modification: rustix::fs::Timespec {
            tv_sec: 1_000_000_000,
            tv_nsec: 0,
        },
    };
    for p in ["sizes/noise-1", "links/soft", "modes"] {
        rustix::fs::utimensat(
            rustix::fs::CWD,
            root.join(p),
            &old,
            rustix::fs::AtFlags::SYMLINK_NOFOLLOW,
        )
        .unwrap();
    }
}

/// Mounts `image` with berth's server on `dir`; the server.
pub(crate) fn berth_mount(berth: &Path, image: &Path, dir: &Path) -> Child {
    let fuse = File::options()
        .read(true)
        .write(true)
        .open("/dev/fuse")
        .unwrap();
    let img = File::open(image).unwrap();
    let opts = std::ffi::CString::new(format!(
        "fd={},rootmode=40000,user_id=0,group_id=0,allow_other",
        fuse.as_raw_fd()
    ))
    .unwrap();
    rustix::mount::mount(
        "berth-squashfs",
        dir,
        "fuse.berth-squashfs",
        rustix::mount::MountFlags::RDONLY | rustix::mount::MountFlags::NODEV,
        opts.as_c_str(),
    )
    .unwrap();
    for f in [&fuse, &img] {
        rustix::io::fcntl_setfd(f, rustix::io::FdFlags::empty()).unwrap();
    }
    Command::new(berth)
        .arg("__squashfs")
        .arg(format!("fd:{}", img.as_raw_fd()))
        .arg(format!("fd:{}", fuse.as_raw_fd()))
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// The exit status and log of a server whose mount is gone.
pub(crate) fn finished(mut server: Child) -> (std::process::ExitStatus, String) {
    let status = server.wait().unwrap();
    let mut log = String::new();
    server
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut log)
        .unwrap();
    (status, log)
}

pub(crate) fn unmount(dir: &Path) {
    rustix::mount::unmount(dir, rustix::mount::UnmountFlags::DETACH).unwrap();
}

pub(crate) fn tool(name: &str) -> String {
    let ok = Command::new("sh")
        .args(["-c", &format!("command -v {name}")])
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(
        ok,
        "{name} is missing: sudo bash tests/setup/setup.sh installs it"
    );
    name.to_string()
}

pub(crate) fn sh(cmd: &mut Command) {
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The images: mksquashfs with each compressor (and block sizes with
/// zstd), and tar2sqfs.
fn images(tree: &Path, dir: &Path) -> Vec<(String, PathBuf)> {
    let mksquashfs = tool("mksquashfs");
    let mut out = Vec::new();
    let variants: Vec<(String, Vec<&str>)> = ["gzip", "lzo", "xz", "lz4", "zstd"]
        .iter()
        .map(|c| (format!("mksquashfs {c}"), vec!["-comp", c]))
        .chain(["4K", "16K", "64K", "1M"].iter().map(|b| {
            (
                format!("mksquashfs zstd -b {b}"),
                vec!["-comp", "zstd", "-b", b],
            )
        }))
        .chain([
            (
                "mksquashfs xz bcj".to_string(),
                vec!["-comp", "xz", "-Xbcj", "x86"],
            ),
            ("mksquashfs no fragments".to_string(), vec!["-no-fragments"]),
            (
                "mksquashfs uncompressed".to_string(),
                vec!["-noI", "-noD", "-noF", "-noX"],
            ),
            ("mksquashfs no xattrs".to_string(), vec!["-no-xattrs"]),
        ])
        .collect();
    for (i, (name, args)) in variants.into_iter().enumerate() {
        let img = dir.join(format!("img-{i}.sqfs"));
        sh(Command::new(&mksquashfs)
            .arg(tree)
            .arg(&img)
            .args(["-noappend", "-quiet", "-no-progress", "-processors", "2"])
            .args(args));
        out.push((name, img));
    }
    let img = dir.join("tar2sqfs.sqfs");
    sh(Command::new("sh").arg("-c").arg(format!(
        "tar --xattrs -C {} -cf - . | {} --quiet --no-skip --compressor zstd {}",
        tree.display(),
        tool("tar2sqfs"),
        img.display()
    )));
    out.push(("tar2sqfs zstd".into(), img));
    out
}

#[test]
#[cfg_attr(
    not(berth_it_root),
    ignore = "needs root and the test fixtures: sudo bash tests/setup/setup.sh"
)]
fn the_tree_berth_serves_is_the_kernels() {
    let env = env();
    let work = tempfile::tempdir().unwrap();
    let tree = work.path().join("tree");
    make_tree(&tree);
    let (kdir, bdir) = (work.path().join("kernel"), work.path().join("berth"));
    fs::create_dir_all(&kdir).unwrap();
    fs::create_dir_all(&bdir).unwrap();
    for (name, img) in images(&tree, work.path()) {
        sh(Command::new("mount")
            .args(["-t", "squashfs", "-o", "loop,ro"])
            .arg(&img)
            .arg(&kdir));
        let server = berth_mount(&env.berth, &img, &bdir);
        let started = Instant::now();
        let want = snapshot(&kdir);
        let kernel_time = started.elapsed();
        let started = Instant::now();
        let got = snapshot(&bdir);
        let berth_time = started.elapsed();
        unmount(&bdir);
        sh(Command::new("umount").arg(&kdir));
        let (status, log) = finished(server);
        assert!(
            status.success() && log.is_empty(),
            "{name}: server {status}: {log}"
        );
        assert!(
            want.len() > 3000,
            "{name}: the kernel shows {} entries",
            want.len()
        );
        for (path, w) in &want {
            assert_eq!(got.get(path), Some(w), "{name}: {path}");
        }
        assert_eq!(got.len(), want.len(), "{name}: entries");
        eprintln!(
            "{name}: {} entries equal (walk: kernel {kernel_time:?}, berth {berth_time:?})",
            want.len()
        );
    }
}

#[test]
#[cfg_attr(
    not(berth_it_root),
    ignore = "needs root and the test fixtures: sudo bash tests/setup/setup.sh"
)]
fn a_corrupt_image_gives_errors_not_a_hang_or_a_dead_server() {
    let env = env();
    let work = tempfile::tempdir().unwrap();
    let tree = work.path().join("tree");
    make_tree(&tree);
    let img = work.path().join("img.sqfs");
    sh(Command::new(tool("mksquashfs")).arg(&tree).arg(&img).args([
        "-noappend",
        "-quiet",
        "-no-progress",
        "-comp",
        "gzip",
    ]));
    let len = fs::metadata(&img).unwrap().len();
    // Garbage over a tenth of the image, in 64 places, past the
    // superblock: data, inodes, listings and tables alike.
    let f = File::options().write(true).open(&img).unwrap();
    for k in 0..64u64 {
        let at = 96 + (len - 200) * k / 64;
        let junk: Vec<u8> = (0..len / 640)
            .map(|i| (i * 31 + k * 7) as u8 ^ 0x5a)
            .collect();
        f.write_all_at(&junk, at).unwrap();
    }
    drop(f);
    let dir = work.path().join("mnt");
    fs::create_dir(&dir).unwrap();
    let mut server = berth_mount(&env.berth, &img, &dir);
    let started = Instant::now();
    let walker = std::thread::spawn({
        let dir = dir.clone();
        move || {
            let (mut ok, mut errors) = (0, 0);
            let mut dirs = vec![dir];
            while let Some(d) = dirs.pop() {
                let Ok(rd) = fs::read_dir(&d) else {
                    errors += 1;
                    continue;
                };
                for e in rd {
                    let Ok(e) = e else {
                        errors += 1;
                        continue;
                    };
                    let p = e.path();
                    match fs::symlink_metadata(&p) {
                        Ok(m) if m.is_dir() => dirs.push(p),
                        Ok(m) if m.is_file() => match fs::read(&p) {
                            Ok(_) => ok += 1,
                            Err(e) => {
                                assert_eq!(
                                    e.raw_os_error(),
                                    Some(libc_eio()),
                                    "{}: {e}",
                                    p.display()
                                );
                                errors += 1
                            }
                        },
                        Ok(_) => ok += 1,
                        Err(_) => errors += 1,
                    }
                }
            }
            (ok, errors)
        }
    });
    while !walker.is_finished() {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the walk of a corrupt image hangs"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let (ok, errors) = walker.join().unwrap();
    assert!(
        server.try_wait().unwrap().is_none(),
        "the server died on a corrupt image"
    );
    unmount(&dir);
    let (status, log) = finished(server);
    assert!(status.success(), "server: {status}: {log}");
    assert!(!log.contains("panic"), "{log}");
    eprintln!(
        "corrupt image: {ok} entries read, {errors} errors; log: {} lines",
        log.lines().count()
    );
}

fn libc_eio() -> i32 {
    5
}

#[test]
#[cfg_attr(
    not(berth_it_env),
    ignore = "needs the test fixtures: sudo bash tests/setup/setup.sh"
)]
fn sixty_four_containers_read_the_same_files_through_one_server() {
    let sb = Sandbox::new(env());
    let image = sb.debian();
    // Cold: no keeper yet; all 64 start at once and read the same tree.
    let script = "find /usr/lib/python3* -type f -name '*.py' | sort | xargs cat | sha256sum";
    let children = sb.spawn_berths(64, |_| {
        ["run", "--entrypoint", "", &image, "/bin/sh", "-c", script]
            .map(String::from)
            .to_vec()
    });
    let outs = outputs(children);
    let first = outs[0].stdout();
    assert!(first.len() > 64, "{first}");
    for o in &outs {
        assert_eq!(o.code(), 0, "{}", o.stderr());
        assert_eq!(o.stdout(), first);
    }
    let servers = sb
        .processes()
        .into_iter()
        .filter(|(_, c)| c.contains("__squashfs"))
        .count();
    assert_eq!(servers, 1, "one server for the node's containers");
}

#[test]
#[cfg_attr(
    not(berth_it_env),
    ignore = "needs the test fixtures: sudo bash tests/setup/setup.sh"
)]
fn a_server_killed_mid_walk_ends_its_containers_reads_with_an_error() {
    let sb = Sandbox::new(env());
    let image = sb.layers();
    // New names each time: every lookup goes to the server.
    let script = "echo ready; i=0; while ls /no-such-$i 2>&1 | grep -q 'No such file'; do i=$((i+1)); done; \
                  echo stopped; ls /no-such-again";
    let mut run = sb
        .berth(&["run", "--entrypoint", "", &image, "/bin/sh", "-c", script])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = wait_ready(&mut run);
    let server = sb
        .processes()
        .into_iter()
        .find(|(_, c)| c.contains("__squashfs"))
        .map(|(p, _)| p)
        .expect("the keeper's berth-squashfs");
    std::thread::sleep(Duration::from_millis(300));
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(server).unwrap(),
        rustix::process::Signal::KILL,
    )
    .unwrap();
    let started = Instant::now();
    while run.try_wait().unwrap().is_none() {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the container hangs on a dead server"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let mut rest = String::new();
    out.read_to_string(&mut rest).unwrap();
    let mut err = String::new();
    run.stderr.take().unwrap().read_to_string(&mut err).unwrap();
    assert!(rest.contains("stopped"), "{rest}{err}");
    assert!(err.contains("not connected"), "{err}");
    sb.wait_keepers_gone();
}
