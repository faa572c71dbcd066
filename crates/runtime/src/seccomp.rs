//! The seccomp filter every container command runs under.
//!
//! Today it denies what lets a container reach its caller's terminal: the
//! `ioctl`s `TIOCSTI` (push input into the terminal: the host shell runs it
//! once the container exits, the CVE-2017-5226 class) and `TIOCLINUX`
//! (console selection and pasting), with `EPERM`, as Flatpak and bubblewrap
//! users do. The command keeps the caller's terminal as its stdio (nothing
//! is copied through berth), so this is what keeps that design safe.
//!
//! The filter is a dozen classic BPF instructions, written out here rather
//! than compiled by a crate: it checks the architecture (the 32-bit compat
//! entry has its own `ioctl` number, and on x86_64 the x32 ABI is refused
//! outright so it cannot be used to go around the check), the syscall
//! number, and the request's low 32 bits (the kernel truncates it to
//! `unsigned int`).

use crate::error::{Error, Result};

/// Which filter a container command gets.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Seccomp {
    /// berth's default filter.
    #[default]
    Default,
    /// None (`--security-opt seccomp=unconfined`).
    Unconfined,
}

impl Seccomp {
    /// Parses the value of `--security-opt seccomp=VALUE`.
    pub fn parse(value: &str) -> Result<Self> {
        match value {
            "unconfined" => Ok(Seccomp::Unconfined),
            "default" => Ok(Seccomp::Default),
            other => Err(Error::Usage(format!(
                "--security-opt seccomp={other}: berth knows `default` and `unconfined`; profiles from a file are not supported yet"
            ))),
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
}

#[cfg(target_arch = "aarch64")]
mod arch {
    pub const NATIVE: u32 = 0xC000_00B7; // AUDIT_ARCH_AARCH64
    pub const NATIVE_IOCTL: u32 = 29;
    pub const COMPAT: u32 = 0x4000_0028; // AUDIT_ARCH_ARM
    pub const COMPAT_IOCTL: u32 = 54;
    pub const X32_BIT: Option<u32> = None;
}

const TIOCSTI: u32 = 0x5412;
const TIOCLINUX: u32 = 0x541C;

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
    use libc::{BPF_ABS, BPF_JEQ, BPF_JGE, BPF_JMP, BPF_K, BPF_LD, BPF_RET, BPF_W};
    let load = |off| stmt(BPF_LD | BPF_W | BPF_ABS, off);
    let ret = |v| stmt(BPF_RET | BPF_K, v);
    let allow = ret(libc::SECCOMP_RET_ALLOW);
    let deny = ret(libc::SECCOMP_RET_ERRNO | libc::EPERM as u32);
    // Jumps are relative to the next instruction; the layout is fixed:
    //  0 ld arch
    //  1 jeq NATIVE       -> 4
    //  2 jeq COMPAT       -> 8
    //  3 allow                 (another architecture: the kernel refuses it)
    //  4 ld nr
    //  5 jge X32_BIT      -> 14 (deny; on aarch64 a jump to the next)
    //  6 jeq NATIVE_IOCTL -> 10
    //  7 allow
    //  8 ld nr
    //  9 jeq COMPAT_IOCTL -> 10, else -> 13
    // 10 ld arg1 (low 32 bits)
    // 11 jeq TIOCSTI      -> 14
    // 12 jeq TIOCLINUX    -> 14, else -> 13
    // 13 allow
    // 14 deny
    let x32 = match arch::X32_BIT {
        Some(bit) => jump(BPF_JMP | BPF_JGE | BPF_K, bit, 8, 0),
        None => jump(BPF_JMP | BPF_JEQ | BPF_K, u32::MAX, 0, 0),
    };
    vec![
        load(OFF_ARCH),
        jump(BPF_JMP | BPF_JEQ | BPF_K, arch::NATIVE, 2, 0),
        jump(BPF_JMP | BPF_JEQ | BPF_K, arch::COMPAT, 5, 0),
        allow,
        load(OFF_NR),
        x32,
        jump(BPF_JMP | BPF_JEQ | BPF_K, arch::NATIVE_IOCTL, 3, 0),
        allow,
        load(OFF_NR),
        jump(BPF_JMP | BPF_JEQ | BPF_K, arch::COMPAT_IOCTL, 0, 3),
        load(OFF_ARG1_LOW),
        jump(BPF_JMP | BPF_JEQ | BPF_K, TIOCSTI, 2, 0),
        jump(BPF_JMP | BPF_JEQ | BPF_K, TIOCLINUX, 1, 0),
        allow,
        deny,
    ]
}

/// Installs `mode`'s filter on the calling thread (inherited by what it
/// executes). Needs `no_new_privs` (set before) or `CAP_SYS_ADMIN`.
pub fn install(mode: Seccomp) -> Result<()> {
    if mode == Seccomp::Unconfined {
        return Ok(());
    }
    load(&mut default_program()).map_err(|e| {
        Error::Setup(format!(
            "cannot install the seccomp filter: {e} (run with --security-opt seccomp=unconfined where the kernel has no seccomp)"
        ))
    })
}

/// Loads `program` as the thread's seccomp filter (allocates nothing).
fn load(program: &mut [libc::sock_filter]) -> std::io::Result<()> {
    let fprog = libc::sock_fprog {
        len: program.len() as u16,
        filter: program.as_mut_ptr(),
    };
    // SAFETY: `fprog` points at `program`, which outlives the call; the
    // kernel copies the program and keeps no pointer to it.
    let rc = unsafe {
        libc::prctl(
            libc::PR_SET_SECCOMP,
            libc::SECCOMP_MODE_FILTER as libc::c_ulong,
            &fprog as *const libc::sock_fprog as libc::c_ulong,
            0,
            0,
        )
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every jump of the program lands inside it, and both exits are there.
    #[test]
    fn the_program_is_well_formed() {
        let p = default_program();
        assert_eq!(p.len(), 15);
        for (i, ins) in p.iter().enumerate() {
            if u32::from(ins.code) & 0x07 == libc::BPF_JMP {
                let far = usize::from(ins.jt.max(ins.jf));
                assert!(i + 1 + far < p.len(), "jump at {i} leaves the program");
            }
        }
        assert_eq!(p[14].k, libc::SECCOMP_RET_ERRNO | libc::EPERM as u32);
        assert_eq!(p[13].k, libc::SECCOMP_RET_ALLOW);
    }

    /// In a child (the filter cannot be removed): TIOCSTI fails with EPERM,
    /// an ordinary ioctl still works.
    #[test]
    fn tiocsti_is_denied_and_other_ioctls_are_not() {
        let mut program = default_program();
        let (r, _w) = rustix::pipe::pipe().unwrap();
        let pipe = std::os::fd::AsRawFd::as_raw_fd(&r);
        // SAFETY: the child makes raw syscalls only (nothing allocates).
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0);
        if pid == 0 {
            let code = (|| {
                rustix::thread::set_no_new_privs(true).ok()?;
                load(&mut program).ok()?;
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
                Some(if rc == 0 { 0 } else { 3 })
            })()
            .unwrap_or(4);
            // SAFETY: leaves the forked child without running destructors.
            unsafe { libc::_exit(code) };
        }
        let mut status = 0;
        // SAFETY: waits for the child forked above.
        unsafe { libc::waitpid(pid, &mut status, 0) };
        assert!(libc::WIFEXITED(status));
        assert_eq!(libc::WEXITSTATUS(status), 0);
    }
}
