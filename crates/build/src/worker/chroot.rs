//! A helper child chrooted into a stage root, for the steps that work on
//! the image's files with the image's paths (COPY, ADD, WORKDIR).

use std::fs;
use std::io::Read;
use std::path::Path;

use berth_runtime::sys::{self, Fork, Kernel, LINUX};

use super::InImageError;

/// Runs `f` in a forked child chrooted into `root` (paths it uses resolve
/// in the image); its error comes back as text, through a pipe.
pub(super) fn in_root(
    root: &Path,
    f: &mut dyn FnMut() -> Result<(), InImageError>,
) -> Result<(), InImageError> {
    let helper = |what| move |source| InImageError::Helper { what, source };
    let (r, w) = rustix::pipe::pipe().map_err(|e| helper("make a pipe")(e.into()))?;
    let (mut r, w) = (fs::File::from(r), fs::File::from(w));
    match sys::fork().map_err(helper("fork"))? {
        Fork::Child => {
            drop(r);
            let result = LINUX
                .chroot(root)
                .map_err(|e| helper("chroot into the stage root")(e.into()))
                .and_then(|_| f());
            let code = match result {
                Ok(()) => 0,
                Err(e) => {
                    use std::io::Write;
                    let mut w = w;
                    let _ = w.write_all(e.to_string().as_bytes());
                    1
                }
            };
            sys::exit_now(code)
        }
        Fork::Parent(pid) => {
            drop(w);
            let mut msg = String::new();
            let _ = r.read_to_string(&mut msg);
            match sys::wait(pid, false) {
                Ok(Some((_, sys::Exit::Code(0)))) => Ok(()),
                _ if !msg.is_empty() => Err(InImageError::Reported(msg)),
                other => Err(InImageError::HelperEnded(format!("{other:?}"))),
            }
        }
    }
}
