//! An image's loader cache with the injected libraries added, so that
//! `ldconfig -p`, Python's `ctypes.util.find_library` and programs that
//! clear `LD_LIBRARY_PATH` find them as they find them with NVIDIA's
//! container toolkit (which runs the image's `ldconfig`). berth writes the
//! cache itself: no program of the image runs, no directory is scanned,
//! and the result is bound read-only over the image's `/etc/ld.so.cache`.
//!
//! The image's entries are kept (an injected library comes before the
//! image's entry of the same name and type, so the loader takes it, and
//! the image's stays listed for whoever looks for the image's own, such as
//! the MPI bind model's ABI check), except those of glibc-hwcaps
//! subdirectories (glibc 2.33's extension section, which is not copied:
//! the loader then takes the baseline library the cache also lists). The
//! entries are sorted as ldconfig sorts them (`elf/cache.c`): by name
//! with digit runs compared as numbers, descending, the loader's binary
//! search relies on it; then by flags, hwcap bits and hwcap, descending
//! (names are compared as unsigned bytes, where glibc's `char` is signed
//! on x86: only names with bytes above 0x7f could sort apart). Only the new
//! format is written, which every glibc since 2.2 reads.

use std::cmp::Ordering;

use super::{flags, parse_raw, LdCacheError, RawEntry, ENTRY, HEADER, MAGIC_NEW};

/// The hwcap bit of entries that refer to the extension section's
/// glibc-hwcaps names (`DL_CACHE_HWCAP_EXTENSION`).
const HWCAP_EXTENSION: u64 = 1 << 62;

/// `cache_file_new.flags` for this machine's byte order.
const ENDIAN: u8 = if cfg!(target_endian = "little") { 2 } else { 3 };

/// The cache type flags of a 64-bit glibc library of this machine.
pub fn native_flags() -> i32 {
    let arch = match std::env::consts::ARCH {
        "x86_64" => flags::X8664_LIB64,
        "aarch64" => flags::AARCH64_LIB64,
        "powerpc64" => flags::POWERPC_LIB64,
        _ => 0,
    };
    flags::ELF_LIBC6 | arch
}

/// `image` (an image's `/etc/ld.so.cache`) with `libraries` (soname and
/// path in the container) added as native libraries.
pub fn with_libraries(
    image: &[u8],
    libraries: &[(String, String)],
) -> Result<Vec<u8>, LdCacheError> {
    let native = native_flags();
    // The injected first: the sort is stable, and of entries of one name
    // and type the loader takes the first.
    let mut entries: Vec<RawEntry> = libraries
        .iter()
        .map(|(soname, path)| RawEntry {
            flags: native,
            soname: soname.clone(),
            path: path.clone(),
            osversion: 0,
            hwcap: 0,
        })
        .collect();
    entries.extend(
        parse_raw(image)?
            .into_iter()
            .filter(|e| e.hwcap & HWCAP_EXTENSION == 0),
    );
    entries.sort_by(ldconfig_order);
    entries.dedup();
    Ok(encode(&entries))
}

/// ldconfig's order: `compare` in glibc's `elf/cache.c`.
fn ldconfig_order(a: &RawEntry, b: &RawEntry) -> Ordering {
    libcmp(b.soname.as_bytes(), a.soname.as_bytes())
        .then_with(|| b.flags.cmp(&a.flags))
        .then_with(|| b.hwcap.count_ones().cmp(&a.hwcap.count_ones()))
        .then_with(|| b.hwcap.cmp(&a.hwcap))
        .then_with(|| b.osversion.cmp(&a.osversion))
}

/// glibc's `_dl_cache_libcmp`: byte order, except that runs of digits
/// compare as numbers and a digit sorts after any other byte.
fn libcmp(a: &[u8], b: &[u8]) -> Ordering {
    let (mut i, mut j) = (0, 0);
    loop {
        let (x, y) = (a.get(i).copied(), b.get(j).copied());
        match (x, y) {
            (None, None) => return Ordering::Equal,
            (None, Some(_)) => return Ordering::Less,
            (Some(_), None) => return Ordering::Greater,
            (Some(x), Some(y)) if x.is_ascii_digit() && y.is_ascii_digit() => {
                let (mut v, mut w) = (0u64, 0u64);
                while let Some(d) = a.get(i).filter(|d| d.is_ascii_digit()) {
                    v = v.saturating_mul(10).saturating_add(u64::from(d - b'0'));
                    i += 1;
                }
                while let Some(d) = b.get(j).filter(|d| d.is_ascii_digit()) {
                    w = w.saturating_mul(10).saturating_add(u64::from(d - b'0'));
                    j += 1;
                }
                if v != w {
                    return v.cmp(&w);
                }
            }
            (Some(x), Some(_)) if x.is_ascii_digit() => return Ordering::Greater,
            (Some(_), Some(y)) if y.is_ascii_digit() => return Ordering::Less,
            (Some(x), Some(y)) if x != y => return x.cmp(&y),
            _ => {
                i += 1;
                j += 1;
            }
        }
    }
}

/// The new format's bytes: header, entries, strings (offsets from the
/// header's start).
fn encode(entries: &[RawEntry]) -> Vec<u8> {
    let base = HEADER + entries.len() * ENTRY;
    let mut strings: Vec<u8> = Vec::new();
    let mut table: Vec<u8> = Vec::with_capacity(entries.len() * ENTRY);
    for e in entries {
        let key = base + strings.len();
        strings.extend_from_slice(e.soname.as_bytes());
        strings.push(0);
        let value = base + strings.len();
        strings.extend_from_slice(e.path.as_bytes());
        strings.push(0);
        table.extend_from_slice(&e.flags.to_ne_bytes());
        table.extend_from_slice(&(key as u32).to_ne_bytes());
        table.extend_from_slice(&(value as u32).to_ne_bytes());
        table.extend_from_slice(&e.osversion.to_ne_bytes());
        table.extend_from_slice(&e.hwcap.to_ne_bytes());
    }
    let mut out = Vec::with_capacity(base + strings.len());
    out.extend_from_slice(MAGIC_NEW);
    out.extend_from_slice(&(entries.len() as u32).to_ne_bytes());
    out.extend_from_slice(&(strings.len() as u32).to_ne_bytes());
    out.extend_from_slice(&[ENDIAN, 0, 0, 0]);
    // No extension section.
    out.extend_from_slice(&0u32.to_ne_bytes());
    out.extend_from_slice(&[0u8; 12]);
    out.extend_from_slice(&table);
    out.extend_from_slice(&strings);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lib(name: &str, path: &str) -> (String, String) {
        (name.to_string(), path.to_string())
    }

    #[test]
    fn names_compare_as_the_loader_compares_them() {
        assert_eq!(libcmp(b"libc.so.6", b"libc.so.6"), Ordering::Equal);
        assert_eq!(libcmp(b"libfoo.so.10", b"libfoo.so.9"), Ordering::Greater);
        assert_eq!(libcmp(b"libfoo.so.1", b"libfoo.so.1.2"), Ordering::Less);
        assert_eq!(libcmp(b"lib9", b"liba"), Ordering::Greater);
        assert_eq!(libcmp(b"liba", b"libb"), Ordering::Less);
    }

    #[test]
    fn the_injected_libraries_join_the_images_and_come_first() {
        let native = native_flags();
        let image = encode(&[
            RawEntry {
                flags: native,
                soname: "libz.so.1".into(),
                path: "/usr/lib/libz.so.1".into(),
                osversion: 0,
                hwcap: 0,
            },
            RawEntry {
                flags: native,
                soname: "libcuda.so.1".into(),
                path: "/usr/local/cuda/compat/libcuda.so.1".into(),
                osversion: 0,
                hwcap: 0,
            },
            RawEntry {
                flags: native,
                soname: "libm.so.6".into(),
                path: "/usr/lib/glibc-hwcaps/x86-64-v3/libm.so.6".into(),
                osversion: 0,
                hwcap: HWCAP_EXTENSION | 1,
            },
        ]);
        let out = with_libraries(
            &image,
            &[
                lib("libcuda.so.1", "/.berth/lib/libcuda.so.1"),
                lib("libnvidia-ml.so.1", "/.berth/lib/libnvidia-ml.so.1"),
            ],
        )
        .unwrap();
        let got: Vec<(String, String)> = super::super::parse(&out)
            .unwrap()
            .into_iter()
            .map(|e| (e.soname, e.path))
            .collect();
        assert_eq!(
            got,
            [
                lib("libz.so.1", "/usr/lib/libz.so.1"),
                lib("libnvidia-ml.so.1", "/.berth/lib/libnvidia-ml.so.1"),
                lib("libcuda.so.1", "/.berth/lib/libcuda.so.1"),
                lib("libcuda.so.1", "/usr/local/cuda/compat/libcuda.so.1"),
            ]
        );
    }

    /// The host's cache, rewritten with nothing added, lists what
    /// `ldconfig -p` lists, in ldconfig's order.
    #[test]
    fn the_hosts_cache_keeps_its_order() {
        let Ok(bytes) = std::fs::read("/etc/ld.so.cache") else {
            return;
        };
        let Ok(theirs) = parse_raw(&bytes) else {
            return;
        };
        let ours = parse_raw(&with_libraries(&bytes, &[]).unwrap()).unwrap();
        let plain: Vec<&RawEntry> = theirs
            .iter()
            .filter(|e| e.hwcap & HWCAP_EXTENSION == 0)
            .collect();
        assert_eq!(ours.iter().collect::<Vec<_>>(), plain);
    }
}
