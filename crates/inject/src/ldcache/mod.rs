//! The glibc loader cache (`/etc/ld.so.cache`), parsed directly.
//!
//! Format (glibc `elf/cache.c`, "glibc-ld.so.cache1.1"): a 48-byte header
//! (magic and version, 20 bytes; entry count; string table length; flags;
//! extension offset; 12 unused bytes), then 24-byte entries (flags `i32`,
//! key and value string offsets `u32`, OS version `u32`, hwcap `u64`), then
//! NUL-terminated strings. Offsets count from the start of that header.
//! Older caches put a libc5-style table ("ld.so-1.7.0") first; the new
//! table follows it, 8-byte aligned.
//!
//! Everything is bounds-checked: a malformed cache is an error, never a
//! panic (the file comes from the host, but also from images).
//!
//! [`write`](mod@write) makes an image's cache with the injected libraries added.

pub mod write;

pub(crate) const MAGIC_NEW: &[u8] = b"glibc-ld.so.cache1.1";
const MAGIC_OLD: &[u8] = b"ld.so-1.7.0";
pub(crate) const HEADER: usize = 48;
pub(crate) const ENTRY: usize = 24;
const OLD_HEADER: usize = 16;
const OLD_ENTRY: usize = 12;

/// Library type flags (`FLAG_ELF_LIBC6` and the architecture bits).
pub mod flags {
    /// Mask of the library type.
    pub const TYPE_MASK: i32 = 0x00ff;
    /// A glibc (libc6) ELF library.
    pub const ELF_LIBC6: i32 = 0x0003;
    /// Mask of the architecture bits.
    pub const ARCH_MASK: i32 = 0xff00;
    /// x86-64.
    pub const X8664_LIB64: i32 = 0x0300;
    /// AArch64.
    pub const AARCH64_LIB64: i32 = 0x0a00;
    /// 64-bit PowerPC, little-endian (ELFv2).
    pub const POWERPC_LIB64: i32 = 0x0500;
}

/// One cache entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// The soname (`libcuda.so.1`).
    pub soname: String,
    /// The path the loader uses.
    pub path: String,
    /// Type and architecture flags.
    pub flags: i32,
}

impl Entry {
    /// Whether the entry is a 64-bit library of this machine's
    /// architecture (what a container of the host's architecture loads).
    pub fn is_native(&self) -> bool {
        let arch = match std::env::consts::ARCH {
            "x86_64" => flags::X8664_LIB64,
            "aarch64" => flags::AARCH64_LIB64,
            "powerpc64" => flags::POWERPC_LIB64,
            _ => return self.flags & flags::TYPE_MASK == flags::ELF_LIBC6,
        };
        self.flags & flags::TYPE_MASK == flags::ELF_LIBC6 && self.flags & flags::ARCH_MASK == arch
    }
}

/// Why a cache could not be read.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum LdCacheError {
    /// Not a loader cache, or a format berth does not know.
    #[error("not a glibc ld.so.cache (unknown magic)")]
    BadMagic,
    /// The file ends before what its header announces.
    #[error("truncated ld.so.cache: {0}")]
    Truncated(&'static str),
    /// A string offset points outside the file or is not terminated.
    #[error("ld.so.cache entry {0} has a bad string offset")]
    BadString(usize),
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(
        b.get(at..at.checked_add(4)?)?.try_into().ok()?,
    ))
}

fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_ne_bytes(
        b.get(at..at.checked_add(8)?)?.try_into().ok()?,
    ))
}

fn i32_at(b: &[u8], at: usize) -> Option<i32> {
    Some(i32::from_ne_bytes(
        b.get(at..at.checked_add(4)?)?.try_into().ok()?,
    ))
}

fn string_at(b: &[u8], at: usize) -> Option<String> {
    let rest = b.get(at..)?;
    let end = rest.iter().position(|c| *c == 0)?;
    Some(String::from_utf8_lossy(&rest[..end]).into_owned())
}

/// Parses a loader cache.
pub fn parse(bytes: &[u8]) -> Result<Vec<Entry>, LdCacheError> {
    Ok(parse_raw(bytes)?
        .into_iter()
        .map(|r| Entry {
            soname: r.soname,
            path: r.path,
            flags: r.flags,
        })
        .collect())
}

/// One entry as the cache holds it, for [`write`]'s copy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RawEntry {
    pub(crate) flags: i32,
    pub(crate) soname: String,
    pub(crate) path: String,
    pub(crate) osversion: u32,
    pub(crate) hwcap: u64,
}

/// Parses a loader cache's entries with every field.
pub(crate) fn parse_raw(bytes: &[u8]) -> Result<Vec<RawEntry>, LdCacheError> {
    let new = if bytes.starts_with(MAGIC_NEW) {
        bytes
    } else if bytes.starts_with(MAGIC_OLD) {
        let n = u32_at(bytes, 12).ok_or(LdCacheError::Truncated("old header"))? as usize;
        let offset = n
            .checked_mul(OLD_ENTRY)
            .and_then(|s| s.checked_add(OLD_HEADER))
            .map(|o| (o + 7) & !7)
            .ok_or(LdCacheError::Truncated("old table"))?;
        let rest = bytes
            .get(offset..)
            .ok_or(LdCacheError::Truncated("old table"))?;
        if !rest.starts_with(MAGIC_NEW) {
            // A libc5-only cache: nothing a glibc program can use.
            return Err(LdCacheError::BadMagic);
        }
        rest
    } else {
        return Err(LdCacheError::BadMagic);
    };
    let count = u32_at(new, 20).ok_or(LdCacheError::Truncated("header"))? as usize;
    if new.len() < HEADER {
        return Err(LdCacheError::Truncated("header"));
    }
    let table_end = count
        .checked_mul(ENTRY)
        .and_then(|t| t.checked_add(HEADER))
        .ok_or(LdCacheError::Truncated("entries"))?;
    if new.len() < table_end {
        return Err(LdCacheError::Truncated("entries"));
    }
    let mut out = Vec::with_capacity(count);
    for i in 0..count {
        let at = HEADER + i * ENTRY;
        let flags = i32_at(new, at).ok_or(LdCacheError::Truncated("entries"))?;
        let key = u32_at(new, at + 4).ok_or(LdCacheError::Truncated("entries"))? as usize;
        let value = u32_at(new, at + 8).ok_or(LdCacheError::Truncated("entries"))? as usize;
        let osversion = u32_at(new, at + 12).ok_or(LdCacheError::Truncated("entries"))?;
        let hwcap = u64_at(new, at + 16).ok_or(LdCacheError::Truncated("entries"))?;
        let soname = string_at(new, key).ok_or(LdCacheError::BadString(i))?;
        let path = string_at(new, value).ok_or(LdCacheError::BadString(i))?;
        out.push(RawEntry {
            flags,
            soname,
            path,
            osversion,
            hwcap,
        });
    }
    Ok(out)
}

/// Reads and parses a cache file (the host's: `/etc/ld.so.cache`).
pub fn read(path: &std::path::Path) -> std::io::Result<Vec<Entry>> {
    let bytes = std::fs::read(path)?;
    parse(&bytes).map_err(|e| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("{}: {e}", path.display()),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A cache with the given (flags, soname, path) entries, as ldconfig writes it.
    fn build(entries: &[(i32, &str, &str)]) -> Vec<u8> {
        let mut strings = Vec::new();
        let base = HEADER + entries.len() * ENTRY;
        let mut offsets = Vec::new();
        for (_, soname, path) in entries {
            let k = base + strings.len();
            strings.extend_from_slice(soname.as_bytes());
            strings.push(0);
            let v = base + strings.len();
            strings.extend_from_slice(path.as_bytes());
            strings.push(0);
            offsets.push((k as u32, v as u32));
        }
        let mut b = Vec::new();
        b.extend_from_slice(MAGIC_NEW);
        b.extend_from_slice(&(entries.len() as u32).to_ne_bytes());
        b.extend_from_slice(&(strings.len() as u32).to_ne_bytes());
        b.extend_from_slice(&[2, 0, 0, 0]);
        b.extend_from_slice(&0u32.to_ne_bytes());
        b.extend_from_slice(&[0u8; 12]);
        for ((flags, _, _), (k, v)) in entries.iter().zip(&offsets) {
            b.extend_from_slice(&flags.to_ne_bytes());
            b.extend_from_slice(&k.to_ne_bytes());
            b.extend_from_slice(&v.to_ne_bytes());
            b.extend_from_slice(&0u32.to_ne_bytes());
            b.extend_from_slice(&0u64.to_ne_bytes());
        }
        b.extend_from_slice(&strings);
        b
    }

    #[test]
    fn parses_what_ldconfig_writes() {
        let b = build(&[
            (
                0x0303,
                "libcuda.so.1",
                "/usr/lib/x86_64-linux-gnu/libcuda.so.1",
            ),
            (0x0003, "libfoo.so.2", "/usr/lib32/libfoo.so.2"),
        ]);
        let e = parse(&b).unwrap();
        assert_eq!(e.len(), 2);
        assert_eq!(e[0].soname, "libcuda.so.1");
        assert_eq!(e[0].path, "/usr/lib/x86_64-linux-gnu/libcuda.so.1");
        if std::env::consts::ARCH == "x86_64" {
            assert!(e[0].is_native());
            assert!(!e[1].is_native());
        }
    }

    #[test]
    fn old_table_first_then_new() {
        let new = build(&[(0x0303, "libz.so.1", "/lib/libz.so.1")]);
        let mut b = Vec::new();
        b.extend_from_slice(MAGIC_OLD);
        b.push(0);
        b.extend_from_slice(&1u32.to_ne_bytes());
        b.extend_from_slice(&[0u8; OLD_ENTRY]);
        while b.len() % 8 != 0 {
            b.push(0);
        }
        b.extend_from_slice(&new);
        assert_eq!(parse(&b).unwrap()[0].soname, "libz.so.1");
    }

    #[test]
    fn malformed_caches_are_errors() {
        assert_eq!(parse(b"nonsense"), Err(LdCacheError::BadMagic));
        let b = build(&[(0x0303, "a", "b")]);
        assert!(matches!(parse(&b[..30]), Err(LdCacheError::Truncated(_))));
        assert!(matches!(
            parse(&b[..HEADER + 10]),
            Err(LdCacheError::Truncated(_))
        ));
        let mut bad = b.clone();
        let at = HEADER + 4;
        bad[at..at + 4].copy_from_slice(&u32::MAX.to_ne_bytes());
        assert_eq!(parse(&bad), Err(LdCacheError::BadString(0)));
        // Strings not terminated before the end.
        let cut = b.len() - 1;
        assert_eq!(parse(&b[..cut]), Err(LdCacheError::BadString(0)));
    }

    /// The host's cache read by berth equals what `ldconfig -p` prints.
    #[test]
    fn host_cache_matches_ldconfig() {
        let path = std::path::Path::new("/etc/ld.so.cache");
        let Ok(out) = std::process::Command::new("/sbin/ldconfig")
            .arg("-p")
            .output()
        else {
            return;
        };
        if !path.exists() || !out.status.success() {
            return;
        }
        let ours: std::collections::BTreeSet<(String, String)> = read(path)
            .unwrap()
            .into_iter()
            .map(|e| (e.soname, e.path))
            .collect();
        let theirs: std::collections::BTreeSet<(String, String)> =
            String::from_utf8_lossy(&out.stdout)
                .lines()
                .skip(1)
                .filter_map(|l| {
                    let (left, path) = l.split_once(" => ")?;
                    let soname = left.trim().split(" (").next()?.to_string();
                    Some((soname, path.trim().to_string()))
                })
                .collect();
        assert!(!theirs.is_empty());
        assert_eq!(ours, theirs);
    }

    proptest! {
        #[test]
        fn never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            let _ = parse(&bytes);
            let mut with_magic = MAGIC_NEW.to_vec();
            with_magic.extend_from_slice(&bytes);
            let _ = parse(&with_magic);
        }
    }
}
