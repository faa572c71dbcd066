//! Whiteouts: how a layer says that something of the layers below it is
//! gone (the OCI image spec's "Whiteouts", with AUFS's names). One rule for
//! every reader and writer of layers in berth:
//!
//! - `.wh.NAME` removes `NAME`, in the same directory, from the lower
//!   layers;
//! - `.wh..wh..opq`, the opaque marker, hides everything the lower layers
//!   have in its directory;
//! - any other name that starts with `.wh.` is [`Whiteout::Reserved`]:
//!   AUFS's own bookkeeping (`.wh..wh.plnk`, `.wh..wh.aufs`), or a name
//!   that names no sibling (`.wh.`, `.wh..`, `.wh...`). It is neither
//!   content nor a removal; readers skip it.

/// What every whiteout name starts with.
pub const PREFIX: &str = ".wh.";

/// The opaque marker's name.
pub const OPAQUE: &str = ".wh..wh..opq";

/// What a layer entry's last path component means when it is a whiteout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Whiteout<'a> {
    /// `.wh..wh..opq`: the lower layers' entries in this directory are
    /// hidden.
    Opaque,
    /// `.wh.NAME`: `NAME` of the lower layers is removed.
    Remove(&'a [u8]),
    /// A `.wh.` name that removes nothing: skipped.
    Reserved,
}

impl<'a> Whiteout<'a> {
    /// Classifies an entry's last path component (no `/` in it): `None`
    /// when it is no whiteout, an ordinary entry.
    pub fn of(name: &'a [u8]) -> Option<Self> {
        let rest = name.strip_prefix(PREFIX.as_bytes())?;
        if name == OPAQUE.as_bytes() {
            return Some(Self::Opaque);
        }
        let names_a_sibling = !rest.is_empty()
            && rest != b"."
            && rest != b".."
            && !rest.starts_with(PREFIX.as_bytes());
        Some(if names_a_sibling {
            Self::Remove(rest)
        } else {
            Self::Reserved
        })
    }
}

/// The name of the entry that removes `name` (a last path component) from
/// the lower layers: `.wh.NAME`.
pub fn removal_of(name: &str) -> String {
    format!("{PREFIX}{name}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_classified_by_one_rule() {
        assert_eq!(Whiteout::of(b"file"), None);
        assert_eq!(Whiteout::of(b".whx"), None);
        assert_eq!(Whiteout::of(b".wh"), None);
        assert_eq!(Whiteout::of(b".wh.file"), Some(Whiteout::Remove(b"file")));
        assert_eq!(
            Whiteout::of(b".wh..hidden"),
            Some(Whiteout::Remove(b".hidden"))
        );
        assert_eq!(Whiteout::of(b".wh..wh..opq"), Some(Whiteout::Opaque));
        for reserved in [
            &b".wh."[..],
            b".wh..",
            b".wh...",
            b".wh..wh.plnk",
            b".wh..wh.aufs",
            b".wh..wh..opqx",
        ] {
            assert_eq!(Whiteout::of(reserved), Some(Whiteout::Reserved));
        }
    }

    #[test]
    fn a_removal_name_classifies_back_to_its_removal() {
        let name = removal_of("etc");
        assert_eq!(name, ".wh.etc");
        assert_eq!(
            Whiteout::of(name.as_bytes()),
            Some(Whiteout::Remove(b"etc"))
        );
        assert_eq!(Whiteout::of(OPAQUE.as_bytes()), Some(Whiteout::Opaque));
    }
}
