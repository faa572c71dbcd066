//! The seccomp filter every container command runs under.
//!
//! It denies what lets a container reach its caller's terminal: the
//! `ioctl`s `TIOCSTI` (push input into the terminal: the host shell runs it
//! once the container exits, the CVE-2017-5226 class) and `TIOCLINUX`
//! (console selection and pasting), with `EPERM`, as Flatpak and bubblewrap
//! users do. The command keeps the caller's terminal as its stdio (nothing
//! is copied through berth), so this is what keeps that design safe.
//!
//! It also refuses the system calls in [`DENIED`] (podman's default
//! profile's, less what HPC tools use). A profile from a file replaces
//! it ([`profile`]); the terminal guard stays.
//!
//! The filter is about fifty classic BPF instructions, assembled here
//! rather than compiled by a crate: it checks the architecture (the 32-bit compat
//! entry has its own `ioctl` number, and on x86_64 the x32 ABI is refused
//! outright so it cannot be used to go around the check), the syscall
//! number, and the request's low 32 bits (the kernel truncates it to
//! `unsigned int`).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::idmap::IdMode;

pub mod profile;
pub mod root_emulation;

pub use root_emulation::RootEmulation;

/// Which filter a container command gets.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Seccomp {
    /// berth's default filter.
    #[default]
    Default,
    /// None (`--security-opt seccomp=unconfined`).
    Unconfined,
    /// A profile from a file (`--security-opt seccomp=FILE`), compiled.
    Profile(Compiled),
}

/// A profile compiled for one run (see [`profile`]).
#[derive(Clone)]
pub struct Compiled {
    file: PathBuf,
    program: Arc<Vec<libc::sock_filter>>,
}

impl std::fmt::Debug for Compiled {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} ({} instructions)",
            self.file.display(),
            self.program.len()
        )
    }
}

impl PartialEq for Compiled {
    fn eq(&self, other: &Self) -> bool {
        self.file == other.file && Arc::ptr_eq(&self.program, &other.program)
    }
}

impl Eq for Compiled {}

/// Shown as `default`, `unconfined` or the profile's path.
impl serde::Serialize for Seccomp {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.serialize_str(&self.setting())
    }
}

impl Seccomp {
    /// The value of `--security-opt seccomp=` that gives this filter
    /// (`default`, `unconfined` or the profile's path): what
    /// [`Seccomp::parse`] takes back.
    pub fn setting(&self) -> std::borrow::Cow<'_, str> {
        match self {
            Seccomp::Default => "default".into(),
            Seccomp::Unconfined => "unconfined".into(),
            Seccomp::Profile(c) => c.file.to_string_lossy(),
        }
    }

    /// Parses the value of `--security-opt seccomp=VALUE` for a command in
    /// `mode`: `default`, `unconfined`, or the path of a profile (Docker's
    /// or the OCI format), compiled now for what the command will hold.
    pub fn parse(value: &str, mode: IdMode) -> Result<Self> {
        match value {
            "unconfined" => Ok(Seccomp::Unconfined),
            "default" => Ok(Seccomp::Default),
            "" => Err(Error::Usage(
                "--security-opt seccomp=: give default, unconfined or a profile's path".into(),
            )),
            file => {
                let ctx = profile::Context {
                    has_cap: Box::new(move |n| match mode {
                        IdMode::Identity => false,
                        IdMode::FakeRoot => true,
                        IdMode::HostRoot => crate::sys::ROOT_KEEPS.contains(&n),
                    }),
                    kernel: profile::parse_kernel(
                        &rustix::system::uname().release().to_string_lossy(),
                    ),
                };
                let program = profile::load_file(Path::new(file), &ctx)?;
                Ok(Seccomp::Profile(Compiled {
                    file: PathBuf::from(file),
                    program: Arc::new(program),
                }))
            }
        }
    }
}

/// `struct seccomp_data` offsets.
const OFF_NR: u32 = 0;
const OFF_ARCH: u32 = 4;
/// The low 32 bits of `args[1]` (little-endian).
const OFF_ARG1_LOW: u32 = 16 + 8;

#[cfg(target_arch = "x86_64")]
mod arch {
    pub const NATIVE: u32 = 0xC000_003E; // AUDIT_ARCH_X86_64
    pub const NATIVE_IOCTL: u32 = 16;
    pub const COMPAT: u32 = 0x4000_0003; // AUDIT_ARCH_I386
    pub const COMPAT_IOCTL: u32 = 54;
    /// `__X32_SYSCALL_BIT`: x32 syscalls are refused as a whole.
    pub const X32_BIT: Option<u32> = Some(0x4000_0000);
    /// [`super::DENIED`] in the i386 table, in the same order (0: none).
    pub const COMPAT_DENIED: [u32; 18] = [
        286, 288, 287, 374, 283, 0, 128, 350, 129, 342, 88, 87, 115, 110, 101, 51, 253, 357,
    ];
    /// `iopl` and `ioperm` (x86 only).
    pub const NATIVE_PORT_IO: [u32; 2] = [libc::SYS_iopl as u32, libc::SYS_ioperm as u32];
}

#[cfg(target_arch = "aarch64")]
mod arch {
    pub const NATIVE: u32 = 0xC000_00B7; // AUDIT_ARCH_AARCH64
    pub const NATIVE_IOCTL: u32 = 29;
    pub const COMPAT: u32 = 0x4000_0028; // AUDIT_ARCH_ARM
    pub const COMPAT_IOCTL: u32 = 54;
    pub const X32_BIT: Option<u32> = None;
    /// [`super::DENIED`] in the 32-bit ARM (EABI) table, in the same order.
    pub const COMPAT_DENIED: [u32; 18] = [
        309, 311, 310, 388, 347, 401, 128, 379, 129, 371, 88, 87, 115, 0, 0, 51, 249, 386,
    ];
    pub const NATIVE_PORT_IO: [u32; 2] = [0, 0];
}

const TIOCSTI: u32 = 0x5412;
const TIOCLINUX: u32 = 0x541C;

/// System calls the default filter refuses with `EPERM`: what podman's and
/// Docker's default profile deny that HPC codes have no use for. Kernel
/// keyrings (not namespaced: a container would see and change the
/// caller's), `userfaultfd` (a tool of kernel exploits), loading or
/// replacing the kernel and its modules, `open_by_handle_at` (the
/// "shocker" escape past bind mounts), reboot, swap, port I/O, process
/// accounting, `lookup_dcookie` and `bpf`. Allowed on purpose, unlike
/// Docker: `ptrace` and `perf_event_open` (debuggers and profilers: gdb,
/// perf, PAPI, LIKWID), `mount`, `unshare` and `setns` (a container
/// runtime inside the container; they need capabilities the command does
/// not have). The x32 and 32-bit compat entry points are covered.
const DENIED: [u32; 18] = [
    libc::SYS_add_key as u32,
    libc::SYS_keyctl as u32,
    libc::SYS_request_key as u32,
    libc::SYS_userfaultfd as u32,
    libc::SYS_kexec_load as u32,
    libc::SYS_kexec_file_load as u32,
    libc::SYS_init_module as u32,
    libc::SYS_finit_module as u32,
    libc::SYS_delete_module as u32,
    libc::SYS_open_by_handle_at as u32,
    libc::SYS_reboot as u32,
    libc::SYS_swapon as u32,
    libc::SYS_swapoff as u32,
    arch::NATIVE_PORT_IO[0],
    arch::NATIVE_PORT_IO[1],
    libc::SYS_acct as u32,
    libc::SYS_lookup_dcookie as u32,
    libc::SYS_bpf as u32,
];

/// One instruction of [`assemble`]'s input: a plain one, a jump to a
/// label when the accumulator equals (or is at least) a value, or a label.
enum Item {
    Op(libc::sock_filter),
    JumpIfEq(u32, Label),
    JumpIfAtLeast(u32, Label),
    Mark(Label),
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Label {
    Native,
    Compat,
    Ioctl,
    Deny,
    /// Root emulation: return success without doing it.
    Fake,
    /// Root emulation: `mknod`'s mode (its second argument) decides.
    ModeArg1,
    /// Root emulation: `mknodat`'s mode (its third argument) decides.
    ModeArg2,
}

/// Resolves labels into the relative offsets classic BPF jumps take (the
/// false branch falls through). Every target here lies ahead of its jump,
/// within 255 instructions.
fn assemble(items: &[Item]) -> Vec<libc::sock_filter> {
    use libc::{BPF_JEQ, BPF_JGE, BPF_JMP, BPF_K};
    let mut at = Vec::new();
    let mut n = 0usize;
    for it in items {
        match it {
            Item::Mark(l) => at.push((*l, n)),
            _ => n += 1,
        }
    }
    let target = |l: Label| at.iter().find(|(m, _)| *m == l).map_or(0, |(_, i)| *i);
    let mut out = Vec::with_capacity(n);
    for it in items {
        let (op, k, l) = match it {
            Item::Op(f) => {
                out.push(*f);
                continue;
            }
            Item::Mark(_) => continue,
            Item::JumpIfEq(k, l) => (BPF_JEQ, *k, *l),
            Item::JumpIfAtLeast(k, l) => (BPF_JGE, *k, *l),
        };
        let jt = target(l).saturating_sub(out.len() + 1);
        out.push(jump(
            BPF_JMP | op | BPF_K,
            k,
            u8::try_from(jt).unwrap_or(0),
            0,
        ));
    }
    out
}

fn stmt(code: u32, k: u32) -> libc::sock_filter {
    libc::sock_filter {
        code: code as u16,
        jt: 0,
        jf: 0,
        k,
    }
}

fn jump(code: u32, k: u32, jt: u8, jf: u8) -> libc::sock_filter {
    libc::sock_filter {
        code: code as u16,
        jt,
        jf,
        k,
    }
}

/// The default filter's program.
fn default_program() -> Vec<libc::sock_filter> {
    use libc::{BPF_ABS, BPF_K, BPF_LD, BPF_RET, BPF_W};
    use Item::{JumpIfAtLeast, JumpIfEq, Mark, Op};
    let load = |off| Op(stmt(BPF_LD | BPF_W | BPF_ABS, off));
    let allow = || Op(stmt(BPF_RET | BPF_K, libc::SECCOMP_RET_ALLOW));
    let mut p = vec![
        load(OFF_ARCH),
        JumpIfEq(arch::NATIVE, Label::Native),
        JumpIfEq(arch::COMPAT, Label::Compat),
        // Another architecture: the kernel refuses its syscalls anyway.
        allow(),
        Mark(Label::Native),
        load(OFF_NR),
    ];
    if let Some(bit) = arch::X32_BIT {
        p.push(JumpIfAtLeast(bit, Label::Deny));
    }
    p.extend(
        DENIED
            .iter()
            .filter(|nr| **nr != 0)
            .map(|nr| JumpIfEq(*nr, Label::Deny)),
    );
    p.extend([
        JumpIfEq(arch::NATIVE_IOCTL, Label::Ioctl),
        allow(),
        Mark(Label::Compat),
        load(OFF_NR),
    ]);
    p.extend(
        arch::COMPAT_DENIED
            .iter()
            .filter(|nr| **nr != 0)
            .map(|nr| JumpIfEq(*nr, Label::Deny)),
    );
    p.extend([
        JumpIfEq(arch::COMPAT_IOCTL, Label::Ioctl),
        allow(),
        Mark(Label::Ioctl),
        load(OFF_ARG1_LOW),
        JumpIfEq(TIOCSTI, Label::Deny),
        JumpIfEq(TIOCLINUX, Label::Deny),
        allow(),
        Mark(Label::Deny),
        Op(stmt(
            BPF_RET | BPF_K,
            libc::SECCOMP_RET_ERRNO | libc::EPERM as u32,
        )),
    ]);
    assemble(&p)
}

/// Installs `mode`'s filter on the calling thread (inherited by what it
/// executes). Needs `no_new_privs` (set before) or `CAP_SYS_ADMIN`.
pub fn install(mode: &Seccomp) -> Result<()> {
    let loaded = match mode {
        Seccomp::Unconfined => return Ok(()),
        Seccomp::Default => load(&default_program()),
        // Compiled before the fork: nothing is allocated here.
        Seccomp::Profile(c) => load(&c.program),
    };
    loaded.map_err(|e| {
        Error::Setup(format!(
            "cannot install the seccomp filter: {e} (run with --security-opt seccomp=unconfined where the kernel has no seccomp)"
        ))
    })
}

/// Loads `program` as the thread's seccomp filter (allocates nothing).
fn load(program: &[libc::sock_filter]) -> std::io::Result<()> {
    crate::sys::process::load_seccomp_filter(program)
}

#[cfg(test)]
#[allow(unsafe_code)]
pub(crate) mod tests {
    use super::*;

    /// Every jump of the program lands inside it, and both exits are there.
    #[test]
    fn the_program_is_well_formed() {
        let p = default_program();
        let last = p.len() - 1;
        for (i, ins) in p.iter().enumerate() {
            if u32::from(ins.code) & 0x07 == libc::BPF_JMP {
                let far = usize::from(ins.jt.max(ins.jf));
                assert!(i + 1 + far <= last, "jump at {i} leaves the program");
                // Every jump that is taken goes somewhere other than the
                // next instruction (a label resolved).
                assert!(ins.jt > 0, "jump at {i} resolves to the next instruction");
            }
        }
        assert_eq!(p[last].k, libc::SECCOMP_RET_ERRNO | libc::EPERM as u32);
        assert_eq!(p[last - 1].k, libc::SECCOMP_RET_ALLOW);
        // Each denied syscall jumps to the last instruction.
        for nr in DENIED.iter().filter(|n| **n != 0) {
            let (i, ins) = p
                .iter()
                .enumerate()
                .find(|(_, x)| x.k == *nr && u32::from(x.code) & 0x07 == libc::BPF_JMP)
                .unwrap();
            assert_eq!(i + 1 + usize::from(ins.jt), last, "syscall {nr}");
        }
    }

    /// In a child (the filter cannot be removed): TIOCSTI fails with EPERM,
    /// an ordinary ioctl still works.
    #[test]
    fn tiocsti_is_denied_and_other_ioctls_are_not() {
        let program = default_program();
        let (r, _w) = rustix::pipe::pipe().unwrap();
        let pipe = std::os::fd::AsRawFd::as_raw_fd(&r);
        let code = exit_code_under(&program, || {
            let c = b'x';
            // SAFETY: ioctl on fd 0 with a valid pointer.
            let rc = unsafe { libc::ioctl(0, libc::TIOCSTI, &c as *const u8) };
            // SAFETY: reads this thread's errno.
            let err = unsafe { *libc::__errno_location() };
            if rc != -1 || err != libc::EPERM {
                return Some(2);
            }
            let mut n: libc::c_int = 0;
            // SAFETY: FIONREAD on a pipe we own, into a c_int.
            let rc = unsafe { libc::ioctl(pipe, libc::FIONREAD, &mut n) };
            if rc != 0 {
                return Some(3);
            }
            // keyctl(KEYCTL_GET_KEYRING_ID, ...) and userfaultfd: EPERM.
            // SAFETY: raw syscalls with integer arguments.
            let k = unsafe { libc::syscall(libc::SYS_keyctl, 0, -3, 0) };
            // SAFETY: reads this thread's errno.
            let kerr = unsafe { *libc::__errno_location() };
            // SAFETY: a raw syscall with an integer argument.
            let u = unsafe { libc::syscall(libc::SYS_userfaultfd, 0) };
            // SAFETY: reads this thread's errno.
            let uerr = unsafe { *libc::__errno_location() };
            if k != -1 || kerr != libc::EPERM || u != -1 || uerr != libc::EPERM {
                return Some(5);
            }
            // getpid still works.
            // SAFETY: getpid has no arguments.
            Some(if unsafe { libc::getpid() } > 0 { 0 } else { 6 })
        });
        assert_eq!(code, 0);
    }

    /// The filter leaves speculative store bypass to the kernel's own
    /// policy: without SECCOMP_FILTER_FLAG_SPEC_ALLOW, kernels before 5.16
    /// force the mitigation on under any filter (`/proc/self/status` then
    /// says "thread force mitigated") and memory-bound code runs slower.
    #[test]
    fn the_filter_does_not_force_the_store_bypass_mitigation() {
        // Under a filter loaded without the flag (a CI container on an old
        // kernel), this process is forced already, for good.
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        if status.contains("force mitigated") {
            eprintln!("skipped: this process's store bypass mitigation is forced already");
            return;
        }
        let code = exit_code_under(&default_program(), || {
            let mut buf = [0u8; 8192];
            // SAFETY: opens a NUL-terminated path.
            let fd = unsafe { libc::open(c"/proc/self/status".as_ptr(), libc::O_RDONLY) };
            if fd < 0 {
                return Some(2);
            }
            let mut len = 0;
            while len < buf.len() {
                // SAFETY: reads into the unused rest of a stack buffer.
                let n = unsafe { libc::read(fd, buf[len..].as_mut_ptr().cast(), buf.len() - len) };
                if n <= 0 {
                    break;
                }
                len += n as usize;
            }
            let forced = buf[..len].windows(15).any(|w| w == b"force mitigated");
            Some(if forced { 3 } else { 0 })
        });
        assert_eq!(code, 0);
    }

    /// Runs `checks` in a forked child under `program` (a filter cannot be
    /// removed) and returns the child's exit code: `checks`' answer, 1 if
    /// the filter could not be loaded.
    pub(crate) fn exit_code_under(
        program: &[libc::sock_filter],
        checks: impl FnOnce() -> Option<i32>,
    ) -> i32 {
        // SAFETY: the child makes raw syscalls only (nothing allocates).
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0);
        if pid == 0 {
            let loaded = crate::sys::Kernel::set_no_new_privs(&crate::sys::LINUX).is_ok()
                && load(program).is_ok();
            let code = if loaded { checks().unwrap_or(4) } else { 1 };
            // SAFETY: leaves the forked child without running destructors.
            unsafe { libc::_exit(code) };
        }
        let mut status = 0;
        // SAFETY: waits for the child forked above.
        unsafe { libc::waitpid(pid, &mut status, 0) };
        assert!(libc::WIFEXITED(status));
        libc::WEXITSTATUS(status)
    }

    /// crun's `tests/no_openat2.c`, berth's way: a seccomp filter makes
    /// `openat2` answer ENOSYS in a child, whose kernel then resolves by
    /// walking, with the same results.
    #[test]
    fn without_openat2_the_kernel_falls_back_to_the_walk() {
        let d = crate::sys::resolve_tests_tree();
        let profile = r#"{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[{"names":["openat2"],"action":"SCMP_ACT_ERRNO","errnoRet":38}]}"#;
        let ctx = crate::seccomp::profile::Context {
            has_cap: Box::new(|_| false),
            kernel: (6, 1),
        };
        let program = crate::seccomp::profile::compile_text(
            profile,
            std::path::Path::new("no-openat2.json"),
            &ctx,
        )
        .unwrap();
        let code = exit_code_under(&program, || {
            let k = crate::sys::Linux::new();
            let ok = crate::sys::read_in_root_for_tests(&k, d.path(), "climb/passwd").ok()?
                == "root:x:0:0::/root:/bin/sh\n"
                && crate::sys::read_in_root_for_tests(&k, d.path(), "loop1/x")
                    == Err(crate::sys::Errno::LOOP)
                && !k.has_openat2();
            Some(if ok { 0 } else { 2 })
        });
        assert_eq!(code, 0);
    }

    /// Kernels before 5.12 have no `mount_setattr`: a filter makes it
    /// answer ENOSYS in a child, where a read-only recursive bind still
    /// makes its submount read-only (remounted from mountinfo).
    #[test]
    fn without_mount_setattr_submounts_are_remounted_one_by_one() {
        use std::os::fd::OwnedFd;
        if rustix::process::getuid().as_raw() != 0 {
            assert!(std::env::var_os("CI").is_none(), "needs root under CI");
            eprintln!("SKIPPED: mounts need root");
            return;
        }
        let d = tempfile::tempdir().unwrap();
        let (src, dst) = (d.path().join("src"), d.path().join("dst"));
        std::fs::create_dir_all(src.join("sub")).unwrap();
        std::fs::create_dir(&dst).unwrap();
        let profile = r#"{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[{"names":["mount_setattr"],"action":"SCMP_ACT_ERRNO","errnoRet":38}]}"#;
        let ctx = crate::seccomp::profile::Context {
            has_cap: Box::new(|_| true),
            kernel: (6, 1),
        };
        let program = crate::seccomp::profile::compile_text(
            profile,
            std::path::Path::new("no-mount-setattr.json"),
            &ctx,
        )
        .unwrap();
        let code = exit_code_under(&program, || {
            use crate::sys::Kernel;
            let k = crate::sys::Linux::new();
            let flags = rustix::thread::UnshareFlags::NEWNS;
            k.unshare(flags).ok()?;
            crate::sys::make_rslave(&k).ok()?;
            k.mount(
                Some(std::path::Path::new("sub")),
                &src.join("sub"),
                Some("tmpfs"),
                0,
                None,
            )
            .ok()?;
            k.mount(Some(&src), &dst, None, libc::MS_BIND | libc::MS_REC, None)
                .ok()?;
            let ro = libc::MS_REMOUNT | libc::MS_BIND | libc::MS_RDONLY;
            k.mount(None, &dst, None, ro, None).ok()?;
            let top: OwnedFd = std::fs::File::open(&dst).ok()?.into();
            let nosys = k.set_mount_attr_recursive(std::os::fd::AsFd::as_fd(&top), 0)
                == Err(crate::sys::Errno::NOSYS);
            crate::rootfs::mounts::below_too(&k, &top, true).ok()?;
            let read_only = |p: &std::path::Path| {
                rustix::fs::statvfs(p)
                    .map(|v| v.f_flag.contains(rustix::fs::StatVfsMountFlags::RDONLY))
                    .unwrap_or(false)
            };
            let ok = nosys && read_only(&dst.join("sub")) && !read_only(&src.join("sub"));
            Some(if ok { 0 } else { 2 })
        });
        assert_eq!(code, 0);
    }
}
