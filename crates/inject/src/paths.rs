//! Where injected things land inside the container.

/// The one directory inside the container where injected libraries land.
/// It is put first on `LD_LIBRARY_PATH` where a library there must win
/// over the image's, and its libraries join the image's loader cache (see
/// the crate docs).
pub const LIB_DIR: &str = "/.berth/lib";

/// Where injected host programs (`nvidia-smi`) land; put first on `PATH`.
pub const BIN_DIR: &str = "/.berth/bin";
