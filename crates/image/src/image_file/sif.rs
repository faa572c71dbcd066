//! The Singularity Image Format (SIF, version "01"), as far as berth reads
//! it: the global header and the descriptors, to find the primary system
//! partition. Layout from the reference library (sylabs/sif 2.8,
//! `pkg/sif`): packed little-endian structs, a 128-byte header at offset 0
//! and `DescriptorsTotal` descriptors of 585 bytes each at
//! `DescriptorsOffset`.

use std::fs::File;
use std::os::unix::fs::FileExt;

/// `SIF_MAGIC\0` at byte 32, after the launch script.
pub const MAGIC: &[u8; 10] = b"SIF_MAGIC\0";
const MAGIC_AT: usize = 32;
const HEADER_LEN: usize = 128;
const DESCRIPTOR_LEN: usize = 585;
/// More descriptors than any SIF has (the library's default is 48).
const MAX_DESCRIPTORS: u64 = 4096;

/// `DataPartition`.
const DATA_PARTITION: i32 = 0x4004;

/// What a partition's file system is (`FSType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FsType {
    /// squashfs (1).
    Squashfs,
    /// ext3 (2).
    Ext3,
    /// An immutable object (3).
    ImmutableObject,
    /// Raw data (4).
    Raw,
    /// A squashfs inside a LUKS (dm-crypt) device (5).
    EncryptedSquashfs,
    /// A squashfs encrypted with gocryptfs (Apptainer's fork: 6).
    GocryptfsSquashfs,
    /// Anything else.
    Other(i32),
}

impl FsType {
    fn from_raw(v: i32) -> Self {
        match v {
            1 => FsType::Squashfs,
            2 => FsType::Ext3,
            3 => FsType::ImmutableObject,
            4 => FsType::Raw,
            5 => FsType::EncryptedSquashfs,
            6 => FsType::GocryptfsSquashfs,
            v => FsType::Other(v),
        }
    }
}

/// What a partition is for (`PartType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PartType {
    /// A system partition (1).
    System,
    /// The primary system partition: the root file system (2).
    PrimarySystem,
    /// A data partition (3).
    Data,
    /// A writable overlay (4).
    Overlay,
    /// Anything else.
    Other(i32),
}

impl PartType {
    fn from_raw(v: i32) -> Self {
        match v {
            1 => PartType::System,
            2 => PartType::PrimarySystem,
            3 => PartType::Data,
            4 => PartType::Overlay,
            v => PartType::Other(v),
        }
    }
}

/// One partition of a SIF file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Partition {
    /// Its descriptor's id.
    pub id: u32,
    /// Where its data starts in the file.
    pub offset: u64,
    /// How many bytes it holds.
    pub size: u64,
    /// Its file system.
    pub fs: FsType,
    /// What it is for.
    pub part: PartType,
    /// Its architecture code (`"02"` is amd64), as stored.
    pub arch: String,
}

/// Why a file is not a SIF berth can run.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SifError {
    /// No SIF magic.
    #[error("not a SIF file (no SIF_MAGIC at byte 32)")]
    NotSif,
    /// The header or a descriptor is malformed.
    #[error("malformed SIF: {0}")]
    Malformed(String),
    /// A version berth does not read.
    #[error("SIF version {0:?}: berth reads version \"01\" (Apptainer 1.x, SingularityCE 3.x and later)")]
    Version(String),
    /// No primary system partition, or more than one.
    #[error("{0}")]
    NoPrimary(String),
    /// The primary partition is of a kind berth does not run.
    #[error("{0}")]
    Unsupported(String),
}

fn le_i32(b: &[u8], at: usize) -> i32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[at..at + 4]);
    i32::from_le_bytes(a)
}

fn le_u32(b: &[u8], at: usize) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[at..at + 4]);
    u32::from_le_bytes(a)
}

fn le_i64(b: &[u8], at: usize) -> i64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    i64::from_le_bytes(a)
}

/// A NUL-padded string field.
fn cstr(b: &[u8]) -> String {
    let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    String::from_utf8_lossy(&b[..end]).into_owned()
}

/// Whether `head` (the first bytes of a file) starts a SIF.
pub fn is_sif(head: &[u8]) -> bool {
    head.get(MAGIC_AT..MAGIC_AT + MAGIC.len()) == Some(&MAGIC[..])
}

/// The partitions of the SIF `file` (`len` bytes long).
pub fn partitions(file: &File, len: u64) -> Result<Vec<Partition>, SifError> {
    let mut h = [0u8; HEADER_LEN];
    file.read_exact_at(&mut h, 0)
        .map_err(|_| SifError::NotSif)?;
    if !is_sif(&h) {
        return Err(SifError::NotSif);
    }
    let version = cstr(&h[42..45]);
    if version != "01" {
        return Err(SifError::Version(version));
    }
    let total = le_i64(&h, 88);
    let desc_off = le_i64(&h, 96);
    let bad = |what: String| SifError::Malformed(what);
    let total = u64::try_from(total)
        .ok()
        .filter(|&n| n <= MAX_DESCRIPTORS)
        .ok_or_else(|| bad(format!("{total} descriptors")))?;
    let desc_off = u64::try_from(desc_off)
        .ok()
        .filter(|&o| o.saturating_add(total * DESCRIPTOR_LEN as u64) <= len)
        .ok_or_else(|| {
            bad(format!(
                "the descriptors at {desc_off} lie outside the file"
            ))
        })?;
    let mut table = vec![0u8; total as usize * DESCRIPTOR_LEN];
    file.read_exact_at(&mut table, desc_off)
        .map_err(|e| bad(format!("cannot read the descriptors: {e}")))?;
    let mut parts = Vec::new();
    for d in table.chunks_exact(DESCRIPTOR_LEN) {
        if d[4] == 0 || le_i32(d, 0) != DATA_PARTITION {
            continue;
        }
        let id = le_u32(d, 5);
        let (offset, size) = (le_i64(d, 17), le_i64(d, 25));
        let in_file = u64::try_from(offset)
            .ok()
            .zip(u64::try_from(size).ok())
            .filter(|&(o, s)| o.checked_add(s).is_some_and(|end| end <= len));
        let Some((offset, size)) = in_file else {
            return Err(bad(format!(
                "partition {id} ({size} bytes at {offset}) lies outside the file ({len} bytes): the file is cut short or damaged"
            )));
        };
        parts.push(Partition {
            id,
            offset,
            size,
            fs: FsType::from_raw(le_i32(d, 201)),
            part: PartType::from_raw(le_i32(d, 205)),
            arch: cstr(&d[209..212]),
        });
    }
    Ok(parts)
}

/// The primary system partition of the SIF `file`: a plain squashfs, as
/// Apptainer picks it (the one partition of type "primary system").
/// Encrypted and ext3 root file systems are refused with what to do.
pub fn primary_squashfs(file: &File, len: u64) -> Result<Partition, SifError> {
    let parts = partitions(file, len)?;
    let mut primary = parts.iter().filter(|p| p.part == PartType::PrimarySystem);
    let Some(p) = primary.next() else {
        let has_overlay = parts.iter().any(|p| p.part == PartType::Overlay);
        return Err(SifError::NoPrimary(format!(
            "the SIF file has no primary system partition{}: it holds no root file system to run",
            if has_overlay {
                " (only an overlay: an overlay SIF is added to an image, it is not one)"
            } else {
                ""
            }
        )));
    };
    if primary.next().is_some() {
        return Err(SifError::NoPrimary(
            "the SIF file has more than one primary system partition".into(),
        ));
    }
    match p.fs {
        FsType::Squashfs => Ok(p.clone()),
        FsType::EncryptedSquashfs | FsType::GocryptfsSquashfs => Err(SifError::Unsupported(
            "the SIF's root file system is encrypted: berth cannot run encrypted SIF files; run it with Apptainer and its key, or rebuild it unencrypted".into(),
        )),
        FsType::Ext3 => Err(SifError::Unsupported(
            "the SIF's root file system is ext3 (a writable image): berth runs squashfs root file systems; convert it with `apptainer build new.sif old.sif`".into(),
        )),
        other => Err(SifError::Unsupported(format!(
            "the SIF's root file system is of type {other:?}, not squashfs: berth cannot run it"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    /// A SIF as the reference library lays it out: header, 48 descriptors
    /// at 4096, `parts` (fs, part type, data) aligned to 4096 from 32768.
    /// A partition: file system type, partition type, data.
    type Part<'a> = (i32, i32, &'a [u8]);

    fn sif(parts: &[Part<'_>]) -> Vec<u8> {
        let total = 48usize;
        let mut f = vec![0u8; 32768];
        f[..31].copy_from_slice(b"#!/usr/bin/env run-singularity\n");
        f[32..42].copy_from_slice(MAGIC);
        f[42..45].copy_from_slice(b"01\0");
        f[45..48].copy_from_slice(b"02\0");
        f[88..96].copy_from_slice(&(total as i64).to_le_bytes());
        f[96..104].copy_from_slice(&4096i64.to_le_bytes());
        f[104..112].copy_from_slice(&((total * DESCRIPTOR_LEN) as i64).to_le_bytes());
        for (i, (fs, pt, data)) in parts.iter().enumerate() {
            let off = f.len();
            f.extend_from_slice(data);
            f.resize(f.len().div_ceil(4096) * 4096, 0);
            let d = &mut f[4096 + i * DESCRIPTOR_LEN..][..DESCRIPTOR_LEN];
            d[0..4].copy_from_slice(&DATA_PARTITION.to_le_bytes());
            d[4] = 1;
            d[5..9].copy_from_slice(&(i as u32 + 1).to_le_bytes());
            d[17..25].copy_from_slice(&(off as i64).to_le_bytes());
            d[25..33].copy_from_slice(&(data.len() as i64).to_le_bytes());
            d[201..205].copy_from_slice(&fs.to_le_bytes());
            d[205..209].copy_from_slice(&pt.to_le_bytes());
            d[209..212].copy_from_slice(b"02\0");
        }
        f
    }

    fn file(bytes: &[u8]) -> (File, u64) {
        let mut f = tempfile::tempfile().unwrap();
        f.write_all(bytes).unwrap();
        (f, bytes.len() as u64)
    }

    #[test]
    fn the_primary_squashfs_partition_is_found() {
        let (f, len) = file(&sif(&[
            (4, 1, b"raw"),
            (1, 2, b"hsqs...."),
            (2, 4, b"ext3"),
        ]));
        let p = primary_squashfs(&f, len).unwrap();
        assert_eq!((p.id, p.offset, p.size), (2, 36864, 8));
        assert_eq!(p.arch, "02");
        assert_eq!(partitions(&f, len).unwrap().len(), 3);
    }

    #[test]
    fn what_berth_cannot_run_is_refused_with_a_reason() {
        let cases: [(&[Part<'_>], &str); 5] = [
            (&[(5, 2, b"LUKS")], "encrypted"),
            (&[(6, 2, b"gocrypt")], "encrypted"),
            (&[(2, 2, b"ext3")], "ext3"),
            (&[(2, 4, b"ext3")], "only an overlay"),
            (&[(1, 2, b"a"), (1, 2, b"b")], "more than one"),
        ];
        for (parts, why) in cases {
            let (f, len) = file(&sif(parts));
            let e = primary_squashfs(&f, len).unwrap_err().to_string();
            assert!(e.contains(why), "{e}");
        }
    }

    #[test]
    fn damaged_headers_are_errors_not_panics() {
        let good = sif(&[(1, 2, b"hsqs....")]);
        let (f, len) = file(&good[..100]);
        assert_eq!(primary_squashfs(&f, len), Err(SifError::NotSif));
        let (f, len) = file(&good[..32770]);
        assert!(matches!(
            primary_squashfs(&f, len),
            Err(SifError::Malformed(_))
        ));
        let mut v = good.clone();
        v[42..45].copy_from_slice(b"00\0");
        let (f, len) = file(&v);
        assert!(matches!(
            primary_squashfs(&f, len),
            Err(SifError::Version(_))
        ));
        let mut v = good.clone();
        v[88..96].copy_from_slice(&i64::MAX.to_le_bytes());
        let (f, len) = file(&v);
        assert!(matches!(
            primary_squashfs(&f, len),
            Err(SifError::Malformed(_))
        ));
        // Every byte of the header and first descriptor set to extremes.
        for i in (0..HEADER_LEN).chain(4096..4096 + DESCRIPTOR_LEN) {
            for b in [0u8, 0x7f, 0xff] {
                let mut v = good.clone();
                v[i] = b;
                let (f, len) = file(&v);
                let _ = primary_squashfs(&f, len);
            }
        }
    }
}
