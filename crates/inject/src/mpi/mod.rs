//! The MPI bind model: the host's MPI (tuned for its network) replaces the
//! image's, when their ABIs agree.
//!
//! On the host, at plan time: the module's MPI libraries and their whole
//! `DT_NEEDED` closure (libfabric, libpmi, libucx, ...; glibc's own
//! libraries excepted), read from the ELF files and resolved through their
//! RUNPATH and the host's loader cache, are injected; the newest glibc
//! they need is noted. In the container, before the command starts
//! ([`check_image`]): the image's libmpi (from its ld.so.cache, else the
//! standard directories) must have the host's soname major, and per the
//! module's `abi` mode (Sarus's rules):
//!
//! - `major`: equal majors (`libmpi.so.12` and `libmpi.so.12`);
//! - `full` (default): and the host's minor at least the image's
//!   (`12.1.x` on the host serves an image built against `12.0.y`);
//! - `strict`: equal `major.minor.patch`.
//!
//! and the image's glibc must be at least the one the host libraries need.
//! An Open MPI image (`libmpi.so.40`) against an MPICH-ABI host
//! (`libmpi.so.12`) is refused, naming both.

pub mod abi;
pub mod inject;

pub use abi::{abi_mismatch, check_image, so_version, AbiMode, MpiCheck, SoVersion};
pub use inject::{inject_host_mpi, MpiDef};
