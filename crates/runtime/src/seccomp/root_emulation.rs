//! Root emulation without subordinate ids (`--fakeroot` where the user has
//! no /etc/subuid range): a second seccomp filter, stacked on the first,
//! makes the calls that change owners or identities succeed without doing
//! anything, as Charliecloud's `--force=seccomp` and enroot's filter do.
//! `apt-get`, `dpkg` and `pip` then install packages in a user namespace
//! that maps one id: their `chown` to `_apt` or `man`, their `setresuid`
//! to drop privileges and their `mknod` of device nodes return 0, and the
//! files stay root's (the one id mapped). Other `mknod`s (fifos, sockets,
//! regular files) still happen.
//!
//! Only the native architecture's calls are faked; 32-bit programs see the
//! real errors.

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::{assemble, stmt, Item, Label, OFF_ARCH, OFF_NR};

/// Whether a `--fakeroot` command gets root emulation.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RootEmulation {
    /// Where the user namespace maps one id only (no subordinate range).
    #[default]
    Auto,
    /// Always (`--root-emulation=seccomp`).
    Seccomp,
    /// Never (`--root-emulation=none`; also every run that is not
    /// `--fakeroot`).
    None,
    /// Never, and only where the caller has a subordinate id range
    /// (`--root-emulation=subuid`: an error without one).
    Subuid,
}

impl RootEmulation {
    /// `auto`, `seccomp` or `none`.
    pub fn parse(word: &str) -> Option<Self> {
        match word {
            "auto" => Some(RootEmulation::Auto),
            "seccomp" => Some(RootEmulation::Seccomp),
            "none" => Some(RootEmulation::None),
            "subuid" => Some(RootEmulation::Subuid),
            _ => None,
        }
    }

    /// Before the user namespace exists: whether to emulate (auto: where
    /// the caller has no subordinate id range), or why `subuid` cannot be
    /// had.
    pub fn decide(self) -> Result<bool, String> {
        let ranges = crate::idmap::has_subordinate_ranges;
        match self {
            RootEmulation::Seccomp => Ok(true),
            RootEmulation::None => Ok(false),
            RootEmulation::Auto => Ok(!ranges()),
            RootEmulation::Subuid if ranges() => Ok(false),
            RootEmulation::Subuid => Err(NO_RANGE.into()),
        }
    }

    /// Whether the command, in its user namespace now, gets the filter.
    pub fn wanted(self) -> bool {
        match self {
            RootEmulation::Seccomp => true,
            RootEmulation::None | RootEmulation::Subuid => false,
            RootEmulation::Auto => std::fs::read_to_string("/proc/self/uid_map")
                .map(|m| single_id(&m))
                .unwrap_or(false),
        }
    }
}

/// Why `--root-emulation=subuid` cannot be had, and what to do.
pub const NO_RANGE: &str = "--root-emulation subuid: you have no subordinate id range \
(/etc/subuid and /etc/subgid, with newuidmap and newgidmap installed); ask your admin \
for one, or use auto or seccomp (owners and identity changes are then faked)";

/// apt's configuration file, relative to a root, that keeps apt as root
/// for its downloads: apt drops to `_apt` and checks that `setresuid`
/// worked, which emulation only fakes ("Could not switch group").
pub const APT_HINT_PATH: &str = "etc/apt/apt.conf.d/zz-berth-root-emulation";

/// The setting in [`APT_HINT_PATH`] (enroot's hook writes the same).
const APT_HINT: &str = "APT::Sandbox::User \"root\";\n";

/// Writes apt's hint under `dest` (creating its directories there) when
/// `image` is a root whose `etc`, `etc/apt` and `etc/apt/apt.conf.d` are
/// directories, not links (nothing outside the root is looked at or
/// written, also where `dest` is `image`), and which has no such file;
/// whether it wrote it.
pub fn write_apt_hint(image: &Path, dest: &Path) -> std::io::Result<bool> {
    let real_dir = |p: &Path| std::fs::symlink_metadata(p).is_ok_and(|m| m.is_dir());
    let dirs = ["etc", "etc/apt", "etc/apt/apt.conf.d"];
    if !dirs.iter().all(|d| real_dir(&image.join(d)))
        || std::fs::symlink_metadata(image.join(APT_HINT_PATH)).is_ok()
    {
        return Ok(false);
    }
    for d in dirs {
        match std::fs::create_dir(dest.join(d)) {
            Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => return Err(e),
            _ => {}
        }
    }
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o644)
        .custom_flags(libc::O_NOFOLLOW)
        .open(dest.join(APT_HINT_PATH))?
        .write_all(APT_HINT.as_bytes())?;
    Ok(true)
}

/// Whether a `uid_map` maps one id only.
fn single_id(map: &str) -> bool {
    let lines: Vec<&str> = map.lines().filter(|l| !l.trim().is_empty()).collect();
    lines.len() == 1 && lines[0].split_whitespace().nth(2) == Some("1")
}

/// The faked calls, by number, of the native architecture.
#[cfg(target_arch = "x86_64")]
const FAKED: &[i64] = &[
    libc::SYS_chown,
    libc::SYS_fchown,
    libc::SYS_lchown,
    libc::SYS_fchownat,
    libc::SYS_setuid,
    libc::SYS_setgid,
    libc::SYS_setreuid,
    libc::SYS_setregid,
    libc::SYS_setresuid,
    libc::SYS_setresgid,
    libc::SYS_setgroups,
    libc::SYS_setfsuid,
    libc::SYS_setfsgid,
];
#[cfg(target_arch = "aarch64")]
const FAKED: &[i64] = &[
    libc::SYS_fchown,
    libc::SYS_fchownat,
    libc::SYS_setuid,
    libc::SYS_setgid,
    libc::SYS_setreuid,
    libc::SYS_setregid,
    libc::SYS_setresuid,
    libc::SYS_setresgid,
    libc::SYS_setgroups,
    libc::SYS_setfsuid,
    libc::SYS_setfsgid,
];
#[cfg(target_arch = "x86_64")]
const MKNOD: Option<i64> = Some(libc::SYS_mknod);
#[cfg(target_arch = "aarch64")]
const MKNOD: Option<i64> = None;

#[cfg(target_arch = "x86_64")]
const NATIVE: u32 = 0xC000_003E;
#[cfg(target_arch = "aarch64")]
const NATIVE: u32 = 0xC000_00B7;

/// The low 32 bits of `args[n]` in `struct seccomp_data`.
const fn arg_low(n: u32) -> u32 {
    16 + 8 * n
}

/// The filter's program.
pub(super) fn program() -> Vec<libc::sock_filter> {
    use libc::{BPF_ABS, BPF_ALU, BPF_AND, BPF_K, BPF_LD, BPF_RET, BPF_W};
    use Item::{JumpIfEq, Mark, Op};
    let load = |off| Op(stmt(BPF_LD | BPF_W | BPF_ABS, off));
    let allow = || Op(stmt(BPF_RET | BPF_K, libc::SECCOMP_RET_ALLOW));
    let mut p = vec![
        load(OFF_ARCH),
        JumpIfEq(NATIVE, Label::Native),
        allow(),
        Mark(Label::Native),
        load(OFF_NR),
    ];
    // The x32 ABI is refused by the first filter.
    p.extend(FAKED.iter().map(|nr| JumpIfEq(*nr as u32, Label::Fake)));
    if let Some(nr) = MKNOD {
        p.push(JumpIfEq(nr as u32, Label::ModeArg1));
    }
    p.push(JumpIfEq(libc::SYS_mknodat as u32, Label::ModeArg2));
    p.push(allow());
    for (label, arg) in [(Label::ModeArg1, 1), (Label::ModeArg2, 2)] {
        p.extend([
            Mark(label),
            load(arg_low(arg)),
            Op(stmt(BPF_ALU | BPF_AND | BPF_K, libc::S_IFMT)),
            JumpIfEq(libc::S_IFCHR, Label::Fake),
            JumpIfEq(libc::S_IFBLK, Label::Fake),
            allow(),
        ]);
    }
    p.extend([
        Mark(Label::Fake),
        Op(stmt(BPF_RET | BPF_K, libc::SECCOMP_RET_ERRNO)),
    ]);
    assemble(&p)
}

/// Installs the filter on the calling thread (after the first filter, with
/// `no_new_privs` set).
pub fn install() -> std::io::Result<()> {
    crate::sys::process::load_seccomp_filter(&program())
}

#[cfg(test)]
#[allow(unsafe_code)]
mod tests {
    use super::*;

    #[test]
    fn a_single_id_map_is_told_from_a_range() {
        assert!(single_id("         0       1000          1\n"));
        assert!(!single_id("0 1000 1\n1 100000 65536\n"));
        assert!(!single_id("0 0 4294967295\n"));
    }

    #[test]
    fn apt_hint_only_in_real_directories_of_the_root() {
        let image = tempfile::tempdir().unwrap();
        let dest = tempfile::tempdir().unwrap();
        // No apt: nothing.
        assert!(!write_apt_hint(image.path(), dest.path()).unwrap());
        std::fs::create_dir_all(image.path().join("etc/apt/apt.conf.d")).unwrap();
        assert!(write_apt_hint(image.path(), dest.path()).unwrap());
        let hint = std::fs::read_to_string(dest.path().join(APT_HINT_PATH)).unwrap();
        assert_eq!(hint, "APT::Sandbox::User \"root\";\n");
        // In place, once.
        assert!(write_apt_hint(image.path(), image.path()).unwrap());
        assert!(!write_apt_hint(image.path(), image.path()).unwrap());
        // etc/apt a link out of the root: not followed.
        let outside = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(outside.path().join("apt.conf.d")).unwrap();
        let linked = tempfile::tempdir().unwrap();
        std::fs::create_dir(linked.path().join("etc")).unwrap();
        std::os::unix::fs::symlink(outside.path(), linked.path().join("etc/apt")).unwrap();
        assert!(!write_apt_hint(linked.path(), linked.path()).unwrap());
        assert!(!outside
            .path()
            .join("apt.conf.d/zz-berth-root-emulation")
            .exists());
    }

    #[test]
    fn words() {
        assert_eq!(
            RootEmulation::parse("seccomp"),
            Some(RootEmulation::Seccomp)
        );
        assert_eq!(RootEmulation::parse("none"), Some(RootEmulation::None));
        assert_eq!(RootEmulation::parse("subuid"), Some(RootEmulation::Subuid));
        assert_eq!(RootEmulation::parse("fakeroot"), None);
        assert!(RootEmulation::Seccomp.decide().unwrap());
        assert!(!RootEmulation::None.decide().unwrap());
    }

    /// In a child (the filter cannot be removed): chown to another owner,
    /// setresuid and a device node succeed without effect; a fifo is made.
    #[test]
    fn owner_and_identity_calls_succeed_without_effect() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("f");
        std::fs::write(&file, "x").unwrap();
        let fifo = dir.path().join("p");
        let dev = dir.path().join("d");
        // SAFETY: the child only makes system calls and exits.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            let ok = (|| {
                crate::sys::Kernel::set_no_new_privs(&crate::sys::LINUX).ok()?;
                install().ok()?;
                let c = |p: &std::path::Path| std::ffi::CString::new(p.to_str()?).ok();
                let (f, p, d) = (c(&file)?, c(&fifo)?, c(&dev)?);
                // SAFETY: valid C strings; plain system calls.
                let rc = unsafe {
                    [
                        libc::chown(f.as_ptr(), 4242, 4242),
                        libc::setresuid(4242, 4242, 4242),
                        libc::mknod(d.as_ptr(), libc::S_IFCHR | 0o600, libc::makedev(1, 3)),
                        libc::mknod(p.as_ptr(), libc::S_IFIFO | 0o600, 0),
                    ]
                };
                // SAFETY: getuid cannot fail.
                let uid = unsafe { libc::getuid() };
                Some(rc == [0, 0, 0, 0] && uid != 4242)
            })();
            // SAFETY: exit without unwinding in the forked child.
            unsafe { libc::_exit(if ok == Some(true) { 0 } else { 1 }) };
        }
        let mut status = 0;
        // SAFETY: waits for the child forked above.
        unsafe { libc::waitpid(pid, &mut status, 0) };
        assert_eq!(libc::WEXITSTATUS(status), 0);
        use std::os::unix::fs::{FileTypeExt, MetadataExt};
        assert_ne!(std::fs::metadata(&file).unwrap().uid(), 4242);
        assert!(std::fs::metadata(&fifo).unwrap().file_type().is_fifo());
        assert!(!dev.exists(), "the device node was faked, not made");
    }
}
