//! Owners as the server reports them. The kernel reads a FUSE server's
//! uids and gids in the mounting user namespace, so the server reports
//! each image id as the id of that namespace which stands for it.
//!
//! A namespace's map lines, in their order, stand for the image's ids
//! from 0 up: the first line for the image's root (the user's own id:
//! `0 U 1` when the user is root inside, `U U 1` when the user keeps their
//! host id), the next for ids 1 and up (the subordinate range: `1 S C` or
//! `S S C`). [`image_ranges`] says which. An image id no line stands for
//! would show as the overflow id, 65534, which overlayfs cannot copy up
//! (so a `--writable` container could not change /etc/gshadow,
//! root:shadow) and which no process inside can own: such ids are
//! reported as root's instead, what unpacking the image as the user would
//! give (enroot, Charliecloud) and what root emulation leaves files as.

/// Image id ranges and the namespace ids that stand for them.
#[derive(Debug, Clone, Default)]
pub struct Owners {
    uids: Vec<ImageRange>,
    gids: Vec<ImageRange>,
}

/// `count` image ids from `image`, standing for the namespace's ids from
/// `inside`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ImageRange {
    /// The first image id.
    pub image: u32,
    /// The namespace id that stands for it.
    pub inside: u32,
    /// How many.
    pub count: u32,
}

impl Owners {
    /// The maps of the server's own user namespace (the mounter's).
    pub fn of_this_namespace() -> Self {
        let read = |f: &str| std::fs::read_to_string(f).map(|m| image_ranges(&m)).ok();
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

/// The namespace id that stands for image id `id` (`id` itself when
/// nothing is known), else the one that stands for the image's root.
fn shown(ranges: &[ImageRange], id: u32) -> u32 {
    let Some(root) = ranges.first() else {
        return id;
    };
    stand_in(ranges, id).unwrap_or(root.inside)
}

/// The namespace id that stands for image id `id` in `ranges`, if one
/// does.
pub fn stand_in(ranges: &[ImageRange], id: u32) -> Option<u32> {
    ranges.iter().find_map(|r| {
        let offset = id.checked_sub(r.image)?;
        (offset < r.count).then(|| r.inside + offset)
    })
}

/// The image ids each line of a `uid_map`/`gid_map` text stands for: its
/// lines in order, counted from image id 0.
pub fn image_ranges(map: &str) -> Vec<ImageRange> {
    let mut next: u64 = 0;
    map.lines()
        .filter_map(|l| {
            let f: Vec<u32> = l
                .split_whitespace()
                .filter_map(|w| w.parse().ok())
                .collect();
            let [inside, _, count] = f.as_slice() else {
                return None;
            };
            let image = u32::try_from(next).ok()?;
            next += u64::from(*count);
            Some(ImageRange {
                image,
                inside: *inside,
                count: *count,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owners(uid_map: &str, gid_map: &str) -> Owners {
        Owners {
            uids: image_ranges(uid_map),
            gids: image_ranges(gid_map),
        }
    }

    #[test]
    fn the_user_as_root_inside_reports_image_ids_as_they_are() {
        let one = owners("0 1000 1\n", "0 1000 1\n");
        assert_eq!((one.uid(0), one.uid(42), one.gid(42)), (0, 0, 0));
        let range = owners("0 1000 1\n1 100000 65536\n", "0 1000 1\n1 100000 65536\n");
        assert_eq!(
            (range.uid(42), range.gid(65536), range.uid(65537)),
            (42, 65536, 0)
        );
    }

    #[test]
    fn the_user_with_host_ids_inside_reports_image_root_as_the_user() {
        let one = owners("1000 1000 1\n", "100 100 1\n");
        assert_eq!((one.uid(0), one.uid(42), one.gid(0)), (1000, 1000, 100));
        let range = owners(
            "1000 1000 1\n100000 100000 65536\n",
            "100 100 1\n100000 100000 65536\n",
        );
        assert_eq!(
            (range.uid(0), range.uid(1), range.uid(42), range.gid(65536)),
            (1000, 100000, 100041, 165535)
        );
        // Beyond the range: the image root's stand-in.
        assert_eq!(range.uid(65537), 1000);
    }

    #[test]
    fn the_initial_namespace_reports_every_id_as_it_is() {
        let host = owners("0 0 4294967295\n", "");
        assert_eq!((host.uid(4_000_000_000), host.gid(7)), (4_000_000_000, 7));
    }
}
