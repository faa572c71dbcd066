//! Directory listings: parsed whole when first needed, sorted by name and
//! cached, so that a lookup in a directory of any size is a binary search.

use std::sync::Arc;

use super::error::{corrupt, Result};
use super::inode::{Body, Inode, InodeRef, Kind};
use super::metadata::META_SIZE;
use super::Image;

/// The largest listing read (about a million entries).
const MAX_LISTING: u32 = 64 << 20;
/// Entries one header may announce (the format's own limit).
const MAX_RUN: u32 = 256;

/// An entry of a directory.
#[derive(Debug, Clone)]
pub struct Entry {
    /// Its name: no `/`, no NUL, neither `.` nor `..`.
    pub name: Box<[u8]>,
    /// Its kind, as the listing says.
    pub kind: Kind,
    /// Its inode.
    pub inode: InodeRef,
    /// Its inode number.
    pub number: u32,
}

/// A directory's entries, sorted by name.
#[derive(Debug, Default)]
pub struct Listing {
    /// The entries.
    pub entries: Vec<Entry>,
}

impl Listing {
    /// The entry named `name`.
    pub fn find(&self, name: &[u8]) -> Option<&Entry> {
        self.entries
            .binary_search_by(|e| (*e.name).cmp(name))
            .ok()
            .map(|i| &self.entries[i])
    }
}

impl Image {
    /// The listing of directory `dir` (at `r`), cached.
    pub fn listing(&self, r: InodeRef, dir: &Inode) -> Result<Arc<Listing>> {
        if let Some(l) = self.dir_cache.get(&r) {
            return Ok(l);
        }
        let Body::Dir(d) = dir.body else {
            return Err(corrupt("a listing of what is not a directory"));
        };
        let listing = if d.size <= 3 {
            Listing::default()
        } else {
            self.parse_listing(d.start, d.offset, d.size - 3)?
        };
        let weight = listing
            .entries
            .iter()
            .map(|e| e.name.len() + 48)
            .sum::<usize>();
        let listing = Arc::new(listing);
        self.dir_cache.put(r, listing.clone(), weight);
        Ok(listing)
    }

    fn parse_listing(&self, start: u32, offset: u16, len: u32) -> Result<Listing> {
        if len > MAX_LISTING {
            return Err(corrupt(format!("a directory listing of {len} bytes")));
        }
        let pos = self.sb.dir_table + u64::from(start);
        if usize::from(offset) >= META_SIZE || pos >= self.sb.bytes_used {
            return Err(corrupt("a directory listing outside the directory table"));
        }
        let mut c = self.cursor(pos, usize::from(offset))?;
        let mut left = len;
        let mut entries = Vec::new();
        let take = |left: &mut u32, n: u32| -> Result<()> {
            *left = left
                .checked_sub(n)
                .ok_or_else(|| corrupt("a directory listing runs past its size"))?;
            Ok(())
        };
        while left > 0 {
            take(&mut left, 12)?;
            let count = c.u32()?.saturating_add(1);
            let block = c.u32()?;
            let base = c.u32()?;
            if count > MAX_RUN {
                return Err(corrupt(format!("a directory header of {count} entries")));
            }
            for _ in 0..count {
                take(&mut left, 8)?;
                let off = c.u16()?;
                let delta = c.u16()? as i16;
                let t = c.u16()?;
                let name_len = u32::from(c.u16()?) + 1;
                take(&mut left, name_len)?;
                let name = c.bytes(name_len as usize)?;
                let kind = Kind::from_type(t)
                    .ok_or_else(|| corrupt(format!("directory entry type {t}")))?;
                if name.contains(&b'/') || name.contains(&0) || name == b"." || name == b".." {
                    return Err(corrupt(format!(
                        "a directory entry named {:?}",
                        String::from_utf8_lossy(&name)
                    )));
                }
                entries.push(Entry {
                    name: name.into_boxed_slice(),
                    kind,
                    inode: (u64::from(block) << 16) | u64::from(off),
                    number: base.wrapping_add_signed(i32::from(delta)),
                });
            }
        }
        entries.sort_by(|a, b| a.name.cmp(&b.name));
        entries.dedup_by(|a, b| a.name == b.name);
        Ok(Listing { entries })
    }
}
