//! The filesystem: inode table, latency and concurrency limit, counters.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::fs::File;
use std::io;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fuser::{
    Config, Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo,
    LockOwner, MountOption, OpenFlags, ReplyAttr, ReplyData, ReplyDirectory, ReplyEntry, ReplyOpen,
    ReplyStatfs, Request, SessionACL,
};

/// Latency model.
#[derive(Debug, Clone, Copy)]
pub struct Options {
    /// Time charged to each metadata request.
    pub delay: Duration,
    /// Metadata requests served at once (0: unlimited).
    pub max_concurrent: usize,
}

/// Metadata request types, in counter order.
const OPS: [&str; 7] = [
    "lookup", "getattr", "open", "opendir", "readdir", "readlink", "statfs",
];

#[derive(Default)]
struct Counters {
    by_op: [AtomicU64; 7],
    reads: AtomicU64,
    read_bytes: AtomicU64,
}

impl Counters {
    fn json(&self) -> String {
        let mut parts: Vec<String> = OPS
            .iter()
            .zip(self.by_op.iter())
            .map(|(name, c)| format!("\"{name}\":{}", c.load(Ordering::Relaxed)))
            .collect();
        let total: u64 = self.by_op.iter().map(|c| c.load(Ordering::Relaxed)).sum();
        parts.push(format!("\"metadata_total\":{total}"));
        parts.push(format!("\"reads\":{}", self.reads.load(Ordering::Relaxed)));
        parts.push(format!(
            "\"read_bytes\":{}",
            self.read_bytes.load(Ordering::Relaxed)
        ));
        format!("{{{}}}\n", parts.join(","))
    }
}

/// A counting semaphore for the concurrency limit.
struct Gate {
    limit: usize,
    busy: Mutex<usize>,
    freed: Condvar,
}

impl Gate {
    fn enter(&self) {
        if self.limit == 0 {
            return;
        }
        let Ok(mut busy) = self.busy.lock() else {
            return;
        };
        while *busy >= self.limit {
            busy = match self.freed.wait(busy) {
                Ok(b) => b,
                Err(_) => return,
            };
        }
        *busy += 1;
    }

    fn leave(&self) {
        if self.limit == 0 {
            return;
        }
        if let Ok(mut busy) = self.busy.lock() {
            *busy = busy.saturating_sub(1);
            self.freed.notify_one();
        }
    }
}

struct Inodes {
    paths: Vec<PathBuf>,
    by_path: HashMap<PathBuf, u64>,
}

struct LatencyFs {
    source: PathBuf,
    options: Options,
    gate: Gate,
    counters: Arc<Counters>,
    inodes: Mutex<Inodes>,
    files: Mutex<HashMap<u64, File>>,
    next_fh: AtomicU64,
}

const NO_TTL: Duration = Duration::ZERO;

fn errno(e: &io::Error) -> Errno {
    // EIO when the error carries no OS code.
    Errno::from_i32(e.raw_os_error().unwrap_or(5))
}

fn kind(ft: std::fs::FileType) -> FileType {
    FileType::from_std(ft).unwrap_or(FileType::RegularFile)
}

fn time(secs: i64, nsecs: i64) -> SystemTime {
    if secs >= 0 {
        UNIX_EPOCH + Duration::new(secs as u64, nsecs.clamp(0, 999_999_999) as u32)
    } else {
        UNIX_EPOCH
    }
}

fn attr(ino: u64, m: &std::fs::Metadata) -> FileAttr {
    FileAttr {
        ino: INodeNo(ino),
        size: m.size(),
        blocks: m.blocks(),
        atime: time(m.atime(), m.atime_nsec()),
        mtime: time(m.mtime(), m.mtime_nsec()),
        ctime: time(m.ctime(), m.ctime_nsec()),
        crtime: UNIX_EPOCH,
        kind: kind(m.file_type()),
        perm: (m.mode() & 0o7777) as u16,
        nlink: m.nlink() as u32,
        uid: m.uid(),
        gid: m.gid(),
        rdev: m.rdev() as u32,
        blksize: m.blksize() as u32,
        flags: 0,
    }
}

impl LatencyFs {
    /// Charges one metadata request of type `op`.
    fn charge(&self, op: usize) {
        self.counters.by_op[op].fetch_add(1, Ordering::Relaxed);
        if self.options.delay.is_zero() && self.options.max_concurrent == 0 {
            return;
        }
        self.gate.enter();
        if !self.options.delay.is_zero() {
            std::thread::sleep(self.options.delay);
        }
        self.gate.leave();
    }

    fn path(&self, ino: INodeNo) -> Option<PathBuf> {
        let inodes = self.inodes.lock().ok()?;
        inodes.paths.get(ino.0.checked_sub(1)? as usize).cloned()
    }

    fn ino_of(&self, path: &Path) -> u64 {
        let Ok(mut inodes) = self.inodes.lock() else {
            return 0;
        };
        if let Some(i) = inodes.by_path.get(path) {
            return *i;
        }
        inodes.paths.push(path.to_path_buf());
        let ino = inodes.paths.len() as u64;
        inodes.by_path.insert(path.to_path_buf(), ino);
        ino
    }

    fn full(&self, rel: &Path) -> PathBuf {
        self.source.join(rel)
    }
}

impl Filesystem for LatencyFs {
    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        self.charge(0);
        let Some(dir) = self.path(parent) else {
            return reply.error(Errno::ENOENT);
        };
        let rel = dir.join(name);
        match std::fs::symlink_metadata(self.full(&rel)) {
            Ok(m) => {
                let ino = self.ino_of(&rel);
                reply.entry(&NO_TTL, &attr(ino, &m), Generation(0));
            }
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        self.charge(1);
        let Some(rel) = self.path(ino) else {
            return reply.error(Errno::ENOENT);
        };
        match std::fs::symlink_metadata(self.full(&rel)) {
            Ok(m) => reply.attr(&NO_TTL, &attr(ino.0, &m)),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        self.charge(5);
        let Some(rel) = self.path(ino) else {
            return reply.error(Errno::ENOENT);
        };
        match std::fs::read_link(self.full(&rel)) {
            Ok(t) => reply.data(t.as_os_str().as_encoded_bytes()),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn open(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        self.charge(2);
        let Some(rel) = self.path(ino) else {
            return reply.error(Errno::ENOENT);
        };
        match File::open(self.full(&rel)) {
            Ok(f) => {
                let fh = self.next_fh.fetch_add(1, Ordering::Relaxed);
                if let Ok(mut files) = self.files.lock() {
                    files.insert(fh, f);
                }
                // Keep the page cache across opens: data is not metadata.
                reply.opened(FileHandle(fh), FopenFlags::FOPEN_KEEP_CACHE);
            }
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn read(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let Ok(files) = self.files.lock() else {
            return reply.error(Errno::EIO);
        };
        let Some(f) = files.get(&fh.0) else {
            return reply.error(Errno::EBADF);
        };
        let mut buf = vec![0u8; size as usize];
        match f.read_at(&mut buf, offset) {
            Ok(n) => {
                self.counters.reads.fetch_add(1, Ordering::Relaxed);
                self.counters
                    .read_bytes
                    .fetch_add(n as u64, Ordering::Relaxed);
                reply.data(&buf[..n]);
            }
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn release(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: fuser::ReplyEmpty,
    ) {
        if let Ok(mut files) = self.files.lock() {
            files.remove(&fh.0);
        }
        reply.ok();
    }

    fn opendir(&self, _req: &Request, _ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        self.charge(3);
        reply.opened(FileHandle(0), FopenFlags::empty());
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        self.charge(4);
        let Some(rel) = self.path(ino) else {
            return reply.error(Errno::ENOENT);
        };
        let entries = match std::fs::read_dir(self.full(&rel)) {
            Ok(rd) => rd,
            Err(e) => return reply.error(errno(&e)),
        };
        let mut all: Vec<(u64, FileType, std::ffi::OsString)> = vec![
            (ino.0, FileType::Directory, ".".into()),
            (ino.0, FileType::Directory, "..".into()),
        ];
        for e in entries.flatten() {
            let child = rel.join(e.file_name());
            let ft = e.file_type().map(kind).unwrap_or(FileType::RegularFile);
            all.push((self.ino_of(&child), ft, e.file_name()));
        }
        for (i, (child, ft, name)) in all.into_iter().enumerate().skip(offset as usize) {
            if reply.add(INodeNo(child), (i + 1) as u64, ft, name) {
                break;
            }
        }
        reply.ok();
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        self.charge(6);
        match rustix::fs::statvfs(&self.source) {
            Ok(s) => reply.statfs(
                s.f_blocks,
                s.f_bfree,
                s.f_bavail,
                s.f_files,
                s.f_ffree,
                s.f_bsize as u32,
                s.f_namemax as u32,
                s.f_frsize as u32,
            ),
            Err(e) => reply.error(Errno::from_i32(e.raw_os_error())),
        }
    }
}

/// Mounts `source` at `mountpoint` and serves until unmounted.
pub fn serve(
    source: &Path,
    mountpoint: &Path,
    options: Options,
    threads: usize,
    stats: Option<PathBuf>,
) -> io::Result<()> {
    let source = source.canonicalize()?;
    let counters = Arc::new(Counters::default());
    let fs = LatencyFs {
        source: source.clone(),
        options,
        gate: Gate {
            limit: options.max_concurrent,
            busy: Mutex::new(0),
            freed: Condvar::new(),
        },
        counters: counters.clone(),
        inodes: Mutex::new(Inodes {
            paths: vec![PathBuf::new()],
            by_path: HashMap::from([(PathBuf::new(), 1)]),
        }),
        files: Mutex::new(HashMap::new()),
        next_fh: AtomicU64::new(1),
    };
    if let Some(path) = stats {
        let counters = counters.clone();
        // Written beside and renamed over: a reader (the benchmark reads
        // it between rounds) never sees a half-written or empty file.
        let tmp = path.with_extension("json.tmp");
        std::thread::spawn(move || loop {
            if std::fs::write(&tmp, counters.json()).is_ok() {
                let _ = std::fs::rename(&tmp, &path);
            }
            std::thread::sleep(Duration::from_millis(100));
        });
    }
    let mut config = Config::default();
    // No default_permissions: with zero attribute TTLs the kernel would
    // fetch attributes for a permission check at every path component, a
    // request a real parallel-filesystem client answers from its lock
    // cache. The filesystem is read-only and serves what its source holds.
    config.mount_options = vec![
        MountOption::FSName("latencyfs".to_string()),
        MountOption::RO,
    ];
    config.acl = SessionACL::All;
    config.n_threads = Some(threads.max(1));
    config.clone_fd = true;
    fuser::mount(fs, mountpoint, &config)
}
