//! Loop devices, for real root's kernel squashfs mount.

use std::io;

/// `struct loop_info64` of `<linux/loop.h>`.
#[repr(C)]
struct LoopInfo64 {
    device: u64,
    inode: u64,
    rdevice: u64,
    offset: u64,
    sizelimit: u64,
    number: u32,
    encrypt_type: u32,
    encrypt_key_size: u32,
    flags: u32,
    file_name: [u8; 64],
    crypt_name: [u8; 64],
    encrypt_key: [u8; 32],
    init: [u64; 2],
}

/// `struct loop_config` of `<linux/loop.h>`.
#[repr(C)]
struct LoopConfig {
    fd: u32,
    block_size: u32,
    info: LoopInfo64,
    reserved: [u64; 8],
}

const LOOP_CTL_GET_FREE: libc::c_ulong = 0x4C82;
const LOOP_CONFIGURE: libc::c_ulong = 0x4C0A;
const LOOP_SET_FD: libc::c_ulong = 0x4C00;
const LOOP_CLR_FD: libc::c_ulong = 0x4C01;
const LOOP_SET_STATUS64: libc::c_ulong = 0x4C04;
const LO_FLAGS_READ_ONLY: u32 = 1;
const LO_FLAGS_AUTOCLEAR: u32 = 4;

/// Attaches `file` (by descriptor: no path is walked) to a free loop
/// device, read-only and cleared when its last user goes (the unmount).
/// Returns the device's path and an open descriptor that keeps it attached
/// until the mount holds it. Root only.
pub fn attach_loop_readonly(
    file: &std::fs::File,
    offset: u64,
) -> io::Result<(std::path::PathBuf, std::fs::File)> {
    use std::os::fd::AsRawFd;
    let control = std::fs::File::options()
        .read(true)
        .write(true)
        .open("/dev/loop-control")?;
    let mut last = io::Error::from(io::ErrorKind::ResourceBusy);
    // Another process may take the free device between the two calls.
    for _ in 0..8 {
        // SAFETY: LOOP_CTL_GET_FREE takes no argument and returns a number.
        let n = unsafe { libc::ioctl(control.as_raw_fd(), LOOP_CTL_GET_FREE as _) };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        let path = std::path::PathBuf::from(format!("/dev/loop{n}"));
        let dev = std::fs::File::options().read(true).open(&path)?;
        // SAFETY: all-zero bytes are a valid loop_config (plain integers and
        // arrays).
        let mut config: LoopConfig = unsafe { std::mem::zeroed() };
        config.fd = file.as_raw_fd() as u32;
        config.info.flags = LO_FLAGS_READ_ONLY | LO_FLAGS_AUTOCLEAR;
        config.info.offset = offset;
        // SAFETY: `config` is a valid `struct loop_config` the kernel only
        // reads during the call; both descriptors are open.
        let rc = unsafe {
            libc::ioctl(
                dev.as_raw_fd(),
                LOOP_CONFIGURE as _,
                &config as *const LoopConfig,
            )
        };
        if rc == 0 {
            return Ok((path, dev));
        }
        last = io::Error::last_os_error();
        if matches!(last.raw_os_error(), Some(libc::EINVAL | libc::ENOTTY)) {
            // Before Linux 5.8: LOOP_SET_FD (read-only: the file is open
            // read-only), then the autoclear flag.
            // SAFETY: LOOP_SET_FD takes a descriptor number.
            let rc = unsafe { libc::ioctl(dev.as_raw_fd(), LOOP_SET_FD as _, file.as_raw_fd()) };
            if rc != 0 {
                last = io::Error::last_os_error();
                if last.raw_os_error() == Some(libc::EBUSY) {
                    continue;
                }
                break;
            }
            // SAFETY: `config.info` is a valid loop_info64 the kernel reads.
            let rc = unsafe {
                libc::ioctl(
                    dev.as_raw_fd(),
                    LOOP_SET_STATUS64 as _,
                    &config.info as *const LoopInfo64,
                )
            };
            if rc == 0 {
                return Ok((path, dev));
            }
            last = io::Error::last_os_error();
            // SAFETY: LOOP_CLR_FD takes no argument.
            unsafe { libc::ioctl(dev.as_raw_fd(), LOOP_CLR_FD as _, 0) };
            break;
        }
        if last.raw_os_error() != Some(libc::EBUSY) {
            break;
        }
    }
    Err(last)
}
