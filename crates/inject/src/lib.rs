//! berth's host-resource injection (GPUs, MPI, interconnects).
//!
//! - [`ldcache`]: reading the host's `/etc/ld.so.cache` directly, the way
//!   the dynamic loader does, to find driver and MPI libraries without
//!   running `ldconfig -p`.

pub mod ldcache;
