//! Options of a user's mount beyond read-only: `noexec`, mount
//! propagation, a tmpfs in place of a bind (`--tmpfs`, Pyxis's
//! `tmpfs:DST`) and a squashfs file's tree in place of the file (`:sqsh`).

use serde::{Deserialize, Serialize};

use crate::sys::MountFlags;

/// Mount propagation of one mount, as mount(8) names it. Without one a
/// bind keeps what the container's mount namespace gives it (a slave of
/// the host's, so nothing mounted inside reaches the host).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Propagation {
    /// `private`: this mount only.
    Private,
    /// `rprivate`: this mount and those below it.
    Rprivate,
    /// `slave`.
    Slave,
    /// `rslave`.
    Rslave,
    /// `shared` (within the container's mount namespace: its peers are
    /// there, never the host's).
    Shared,
    /// `rshared`.
    Rshared,
    /// `unbindable`: it cannot be bound elsewhere.
    Unbindable,
    /// `runbindable`.
    Runbindable,
}

impl Propagation {
    /// The name as written (`rslave`), or `None` for another word.
    pub fn parse(word: &str) -> Option<Self> {
        Some(match word {
            "private" => Propagation::Private,
            "rprivate" => Propagation::Rprivate,
            "slave" => Propagation::Slave,
            "rslave" => Propagation::Rslave,
            "shared" => Propagation::Shared,
            "rshared" => Propagation::Rshared,
            "unbindable" => Propagation::Unbindable,
            "runbindable" => Propagation::Runbindable,
            _ => return None,
        })
    }

    /// The mount(2) flags that set it.
    pub fn flags(self) -> MountFlags {
        use Propagation::*;
        let (kind, recursive) = match self {
            Private => (libc::MS_PRIVATE, false),
            Rprivate => (libc::MS_PRIVATE, true),
            Slave => (libc::MS_SLAVE, false),
            Rslave => (libc::MS_SLAVE, true),
            Shared => (libc::MS_SHARED, false),
            Rshared => (libc::MS_SHARED, true),
            Unbindable => (libc::MS_UNBINDABLE, false),
            Runbindable => (libc::MS_UNBINDABLE, true),
        };
        if recursive {
            kind | libc::MS_REC
        } else {
            kind
        }
    }
}

/// What a user's mount asks for beyond its source, target and read-only.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MountOptions {
    /// `noexec`: nothing on it can be executed.
    #[serde(default)]
    pub noexec: bool,
    /// Its propagation, if the user named one.
    #[serde(default)]
    pub propagation: Option<Propagation>,
    /// A fresh tmpfs instead of a bind (the bind's source is then
    /// unused): tmpfs's own options (`size=1G,mode=1777`), possibly empty.
    #[serde(default)]
    pub tmpfs: Option<String>,
    /// A squashfs file's tree in place of the file (`:sqsh`): the squashfs
    /// starts at this byte of the bind's source. The image's keeper mounts
    /// it read-only beside the image, for all runs of the keeper
    /// ([`crate::keeper::data`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub squashfs: Option<u64>,
}

/// The tmpfs options berth passes on (tmpfs(5)); others are refused, so
/// that nothing but a tmpfs's size and shape can be asked for.
pub const TMPFS_OPTIONS: &[&str] = &[
    "size",
    "nr_blocks",
    "nr_inodes",
    "mode",
    "uid",
    "gid",
    "huge",
    "mpol",
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn propagation_words_and_flags() {
        assert_eq!(
            Propagation::parse("runbindable").map(Propagation::flags),
            Some(libc::MS_UNBINDABLE | libc::MS_REC)
        );
        assert_eq!(
            Propagation::parse("private").map(Propagation::flags),
            Some(libc::MS_PRIVATE)
        );
        assert_eq!(Propagation::parse("ro"), None);
        let json = serde_json::to_string(&MountOptions {
            propagation: Some(Propagation::Rslave),
            ..Default::default()
        })
        .unwrap();
        assert!(json.contains("\"rslave\""), "{json}");
    }
}
