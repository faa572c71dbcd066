//! `berth __squashfs fd:IMAGE fd:FUSE [OFFSET] [--verity ROOT]`: the
//! server process the keeper starts on a connection it mounted. With
//! `--verity`, every read is checked against the image file's verity table
//! (see [`crate::verity`]).

use std::fs::File;

use crate::fuse::{self, dev, Fs};
use crate::reader::Image;

/// The server process's main; its exit code.
pub fn serve_main(args: &[String]) -> i32 {
    match run(args) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("berth-squashfs: error: {e}");
            1
        }
    }
}

fn fd_arg(s: &str) -> Result<i32, String> {
    s.strip_prefix("fd:")
        .and_then(|n| n.parse().ok())
        .ok_or_else(|| format!("{s:?} is not fd:N"))
}

fn run(args: &[String]) -> Result<(), String> {
    // Started through /proc/self/fd/N: named by that number otherwise.
    let _ = rustix::thread::set_name(c"berth-squashfs");
    no_new_privs();
    let (args, root) = match args {
        [a @ .., flag, root] if flag == "--verity" => (a, Some(root.as_str())),
        _ => (args, None),
    };
    let (image, conn, offset) = match args {
        [i, c] => (i, c, 0),
        [i, c, o] => (i, c, o.parse().map_err(|_| format!("bad offset {o:?}"))?),
        _ => {
            return Err("usage: berth __squashfs fd:IMAGE fd:FUSE [OFFSET] [--verity ROOT]".into())
        }
    };
    let image = dev::take_fd(fd_arg(image)?).map_err(|e| format!("the image descriptor: {e}"))?;
    let conn = dev::take_fd(fd_arg(conn)?).map_err(|e| format!("the FUSE descriptor: {e}"))?;
    let image = match root {
        Some(root) => Image::open_verified(File::from(image), offset, root),
        None => Image::open(File::from(image), offset),
    }
    .map_err(|e| e.to_string())?;
    let threads = std::env::var("BERTH_SQUASHFS_THREADS")
        .ok()
        .and_then(|t| t.parse().ok())
        .unwrap_or_else(|| {
            std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(2)
                .clamp(2, 8)
        });
    fuse::serve(Fs::new(image), conn, threads).map_err(|e| format!("serving the image: {e}"))
}

/// It never executes anything: nothing it could execute gains privileges.
/// (The runtime's kernel seam is for containers; this process has no
/// container and no fake to test against.)
#[allow(clippy::disallowed_methods)]
fn no_new_privs() {
    let _ = rustix::thread::set_no_new_privs(true);
}
