//! Sealing a squashfs file for the store, in one pass over its bytes: the
//! verity table berth's squashfs server checks reads against is appended
//! after them, and the sha256 of the whole file (table included) is what
//! the record keeps for `berth check`.

use std::fs::File;
use std::io::{self, Read, Write};
use std::path::Path;

use berth_squashfs::verity;
use sha2::{Digest as _, Sha256};

use crate::error::{Error, Result};

/// What sealing gives the record.
#[derive(Debug)]
pub(crate) struct Sealed {
    /// The file's size, table included.
    pub size: u64,
    /// `sha256:` digest of the whole file.
    pub sha256: String,
    /// The verity table's root.
    pub verity: String,
}

/// Hashes a squashfs file's bytes as they pass, from its first byte on.
#[derive(Default)]
pub(crate) struct Sealer {
    sha: Sha256,
    verity: verity::Hasher,
    len: u64,
}

impl Sealer {
    /// Takes the next bytes of the file.
    pub fn update(&mut self, data: &[u8]) {
        self.sha.update(data);
        self.verity.update(data);
        self.len += data.len() as u64;
    }

    /// Writes the verity table to `out`, which must be positioned right
    /// after the bytes seen.
    pub fn finish(mut self, out: &mut impl Write) -> io::Result<Sealed> {
        let mut table = Vec::new();
        let root = self.verity.append_to(&mut table)?;
        self.sha.update(&table);
        out.write_all(&table)?;
        Ok(Sealed {
            size: self.len + table.len() as u64,
            sha256: format!("sha256:{}", hex::encode(self.sha.finalize())),
            verity: root,
        })
    }
}

/// Seals the squashfs file at `path` in place (it is read once, the table
/// appended) and syncs it.
pub(crate) fn seal_file(path: &Path) -> Result<Sealed> {
    let mut f = File::options()
        .read(true)
        .write(true)
        .open(path)
        .map_err(|e| Error::store("open", path, e))?;
    let mut sealer = Sealer::default();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f
            .read(&mut buf)
            .map_err(|e| Error::store("read", path, e))?;
        if n == 0 {
            break;
        }
        sealer.update(&buf[..n]);
    }
    // Reading to the end left the position there: the table follows.
    let sealed = sealer
        .finish(&mut f)
        .map_err(|e| Error::store("write", path, e))?;
    f.sync_all().map_err(|e| Error::store("sync", path, e))?;
    Ok(sealed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sealed_file_hashes_whole_and_its_table_checks() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("image.sqfs");
        let data: Vec<u8> = (0..150_000u32).map(|i| (i % 253) as u8).collect();
        std::fs::write(&path, &data).unwrap();
        let sealed = seal_file(&path).unwrap();
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(sealed.size, bytes.len() as u64);
        assert_eq!(&bytes[..data.len()], &data[..]);
        assert_eq!(
            sealed.sha256,
            format!("sha256:{}", hex::encode(Sha256::digest(&bytes)))
        );
        let f = File::open(&path).unwrap();
        let table = verity::Table::load(&f, 0, &sealed.verity).unwrap();
        assert_eq!(table.data_len, data.len() as u64);
    }
}
