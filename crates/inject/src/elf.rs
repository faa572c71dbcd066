//! What berth needs from a shared library's ELF headers: its soname, the
//! libraries it needs (`DT_NEEDED`), where it looks for them
//! (`DT_RUNPATH`/`DT_RPATH`), the glibc version it needs (`GLIBC_x.y` in
//! its version requirements on libc.so.6) and, for libc itself, the newest
//! `GLIBC_x.y` it defines. Read with the `object` crate (64-bit ELF).

use std::path::Path;

use object::elf::{FileHeader64, DT_NEEDED, DT_RPATH, DT_RUNPATH, DT_SONAME};
use object::read::elf::{Dyn, FileHeader};
use object::Endianness;

/// A glibc version, `(major, minor)`.
pub type GlibcVersion = (u32, u32);

/// The dynamic-linking facts of one library.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ElfInfo {
    /// `DT_SONAME`.
    pub soname: Option<String>,
    /// `DT_NEEDED`, in order.
    pub needed: Vec<String>,
    /// `DT_RUNPATH` and `DT_RPATH` directories, unexpanded (`$ORIGIN`).
    pub runpath: Vec<String>,
    /// The newest `GLIBC_x.y` it requires from libc.so.6.
    pub glibc_needed: Option<GlibcVersion>,
    /// The newest `GLIBC_x.y` it defines (libc.so.6 itself).
    pub glibc_defined: Option<GlibcVersion>,
}

/// `GLIBC_2.34` as `(2, 34)`.
pub fn glibc_version(name: &str) -> Option<GlibcVersion> {
    let v = name.strip_prefix("GLIBC_")?;
    let mut it = v.split('.');
    let major = it.next()?.parse().ok()?;
    let minor = it.next().unwrap_or("0").parse().ok()?;
    Some((major, minor))
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Reads the facts of the library at `path`.
pub fn read(path: &Path) -> Result<ElfInfo, String> {
    let data = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    parse(&data).map_err(|e| format!("{}: {e}", path.display()))
}

/// Parses a 64-bit ELF image.
pub fn parse(data: &[u8]) -> Result<ElfInfo, String> {
    let err = |e: object::read::Error| format!("not a usable 64-bit ELF file ({e})");
    let header = FileHeader64::<Endianness>::parse(data).map_err(err)?;
    let endian = header.endian().map_err(err)?;
    let sections = header.sections(endian, data).map_err(err)?;
    let mut info = ElfInfo::default();
    if let Some((dyns, link)) = sections.dynamic(endian, data).map_err(err)? {
        let strings = sections.strings(endian, data, link).map_err(err)?;
        for d in dyns {
            let Some(tag) = d.tag32(endian) else { continue };
            if !matches!(tag, DT_NEEDED | DT_SONAME | DT_RUNPATH | DT_RPATH) {
                continue;
            }
            let value = text(d.string(endian, strings).map_err(err)?);
            match tag {
                DT_NEEDED => info.needed.push(value),
                DT_SONAME => info.soname = Some(value),
                _ => info.runpath.extend(
                    value
                        .split(':')
                        .filter(|p| !p.is_empty())
                        .map(str::to_string),
                ),
            }
        }
    }
    if let Some((mut needs, link)) = sections.gnu_verneed(endian, data).map_err(err)? {
        let strings = sections.strings(endian, data, link).map_err(err)?;
        while let Some((need, mut aux)) = needs.next().map_err(err)? {
            let is_libc = need.file(endian, strings).map_err(err)? == b"libc.so.6";
            while let Some(a) = aux.next().map_err(err)? {
                if !is_libc {
                    continue;
                }
                if let Some(v) = glibc_version(&text(a.name(endian, strings).map_err(err)?)) {
                    info.glibc_needed = info.glibc_needed.max(Some(v));
                }
            }
        }
    }
    if let Some((mut defs, link)) = sections.gnu_verdef(endian, data).map_err(err)? {
        let strings = sections.strings(endian, data, link).map_err(err)?;
        while let Some((_, mut aux)) = defs.next().map_err(err)? {
            if let Some(a) = aux.next().map_err(err)? {
                if let Some(v) = glibc_version(&text(a.name(endian, strings).map_err(err)?)) {
                    info.glibc_defined = info.glibc_defined.max(Some(v));
                }
            }
        }
    }
    Ok(info)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn glibc_versions_parse() {
        assert_eq!(glibc_version("GLIBC_2.34"), Some((2, 34)));
        assert_eq!(glibc_version("GLIBC_2.2.5"), Some((2, 2)));
        assert_eq!(glibc_version("GLIBC_PRIVATE"), None);
        assert_eq!(glibc_version("GCC_3.0"), None);
    }

    #[test]
    fn reads_the_hosts_libc_and_a_program() {
        // The host's own libc defines its version; /bin/sh needs one.
        let libc = crate::ldcache::read(Path::new("/etc/ld.so.cache"))
            .ok()
            .and_then(|e| {
                e.into_iter()
                    .find(|e| e.soname == "libc.so.6" && e.is_native())
            });
        let Some(libc) = libc else { return };
        let info = read(Path::new(&libc.path)).unwrap();
        assert_eq!(info.soname.as_deref(), Some("libc.so.6"));
        assert!(info.glibc_defined.is_some_and(|v| v >= (2, 17)), "{info:?}");
        let sh = read(Path::new("/bin/sh")).unwrap();
        assert!(sh.needed.iter().any(|n| n == "libc.so.6"), "{sh:?}");
        assert!(sh.glibc_needed.is_some());
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        assert!(parse(b"not an elf").is_err());
        assert!(parse(&[0x7f, b'E', b'L', b'F', 2, 1, 1]).is_err());
    }
}
