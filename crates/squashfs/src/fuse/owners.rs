//! Owners as the server reports them. The kernel reads a FUSE server's
//! uids and gids in the mounting user namespace; an id that namespace
//! does not map (any id but the user's own where there is no subordinate
//! range) would show as the overflow id, 65534, which overlayfs cannot
//! copy up (so a `--writable` container could not change /etc/gshadow,
//! root:shadow) and which no process inside can own. Such ids are reported
//! as root's instead: what unpacking the image as the user would give
//! (enroot, Charliecloud), and what root emulation leaves files as.

/// The inside ranges `(first, count)` of this namespace's uid and gid maps.
#[derive(Debug, Clone, Default)]
pub struct Owners {
    uids: Vec<(u32, u32)>,
    gids: Vec<(u32, u32)>,
}

impl Owners {
    /// The maps of the server's own user namespace (the mounter's).
    pub fn of_this_namespace() -> Self {
        let read = |f: &str| std::fs::read_to_string(f).map(|m| ranges(&m)).ok();
        match (read("/proc/self/uid_map"), read("/proc/self/gid_map")) {
            (Some(uids), Some(gids)) => Owners { uids, gids },
            // Nothing known: report the image's ids as they are.
            _ => Owners::default(),
        }
    }

    /// The uid to report for the image's `id`.
    pub fn uid(&self, id: u32) -> u32 {
        shown(&self.uids, id)
    }

    /// The gid to report for the image's `id`.
    pub fn gid(&self, id: u32) -> u32 {
        shown(&self.gids, id)
    }
}

/// `id` where `ranges` maps it (or nothing is known), else root.
fn shown(ranges: &[(u32, u32)], id: u32) -> u32 {
    let mapped = ranges
        .iter()
        .any(|&(first, count)| id >= first && u64::from(id) < u64::from(first) + u64::from(count));
    if mapped || ranges.is_empty() {
        id
    } else {
        0
    }
}

/// The inside ranges of a `uid_map`/`gid_map` text.
fn ranges(map: &str) -> Vec<(u32, u32)> {
    map.lines()
        .filter_map(|l| {
            let f: Vec<u32> = l
                .split_whitespace()
                .filter_map(|w| w.parse().ok())
                .collect();
            match f.as_slice() {
                [inside, _, count] => Some((*inside, *count)),
                _ => None,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unmapped_owners_are_root_and_mapped_ones_stay() {
        let one = Owners {
            uids: ranges("0 1000 1\n"),
            gids: ranges("0 1000 1\n"),
        };
        assert_eq!((one.uid(0), one.uid(42), one.gid(42)), (0, 0, 0));
        let range = Owners {
            uids: ranges("0 1000 1\n1 100000 65536\n"),
            gids: ranges("0 1000 1\n1 100000 65536\n"),
        };
        assert_eq!(
            (range.uid(42), range.gid(65536), range.uid(65537)),
            (42, 65536, 0)
        );
        let host = Owners {
            uids: ranges("0 0 4294967295\n"),
            gids: Vec::new(),
        };
        assert_eq!((host.uid(4_000_000_000), host.gid(7)), (4_000_000_000, 7));
    }
}
