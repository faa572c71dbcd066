//! What can go wrong reading an image.

/// A failed read of the image: the file, or what it holds.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The image file could not be read.
    #[error("reading the image file: {0}")]
    Io(#[from] std::io::Error),
    /// Not a squashfs 4.0 image at all.
    #[error("not a squashfs 4.0 image: {0}")]
    NotSquashfs(String),
    /// A squashfs feature berth does not read.
    #[error("unsupported squashfs image: {0}")]
    Unsupported(String),
    /// The image contradicts itself or points outside itself.
    #[error("corrupt squashfs image: {0}")]
    Corrupt(String),
    /// A new image (berth's writer) could not be written.
    #[error("writing the new image: {0}")]
    Write(std::io::Error),
    /// The image file does not match its verity table, or has none.
    #[error("verified read failed: {0}")]
    Verity(String),
}

impl Error {
    /// The errno a FUSE request that met this error answers with.
    pub fn errno(&self) -> i32 {
        match self {
            Error::Io(e) | Error::Write(e) => e.raw_os_error().unwrap_or(libc::EIO),
            Error::Unsupported(_) => libc::EOPNOTSUPP,
            _ => libc::EIO,
        }
    }
}

/// A corruption error.
pub(crate) fn corrupt(what: impl Into<String>) -> Error {
    Error::Corrupt(what.into())
}

/// The reader's results.
pub type Result<T> = std::result::Result<T, Error>;
