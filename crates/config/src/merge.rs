//! How a later config file's tables go over an earlier one's
//! ([`crate::ConfigFile::merge`]): key by key, as the files say it (a key
//! the later file sets wins, one it leaves out stays the earlier file's,
//! a list key adds up), not table by table.

use std::collections::BTreeMap;

use serde::{de::DeserializeOwned, Serialize};

/// The tables merged key by key.
const TABLES: &[&str] = &["squashfs", "runtime", "network", "layer_cache"];

/// The keys a file's text sets in each of [`TABLES`] (the text parsed
/// already, so it is valid TOML).
pub(crate) fn given_keys(text: &str) -> BTreeMap<String, Vec<String>> {
    let Ok(top) = text.parse::<toml::Table>() else {
        return BTreeMap::new();
    };
    TABLES
        .iter()
        .filter_map(|t| {
            let table = top.get(*t)?.as_table()?;
            Some((t.to_string(), table.keys().cloned().collect()))
        })
        .collect()
}

/// `over`'s keys `keys` laid over `base`; the keys in `lists` append to
/// `base`'s list instead.
pub(crate) fn table<T: Serialize + DeserializeOwned>(
    base: Option<T>,
    over: Option<T>,
    keys: Option<&Vec<String>>,
    lists: &[&str],
) -> Option<T> {
    let Some(over) = over else {
        return base;
    };
    let Some(base) = base else {
        return Some(over);
    };
    let (Ok(toml::Value::Table(mut merged)), Ok(toml::Value::Table(theirs))) =
        (toml::Value::try_from(&base), toml::Value::try_from(&over))
    else {
        return Some(over);
    };
    for key in keys.into_iter().flatten() {
        let Some(value) = theirs.get(key) else {
            continue;
        };
        match (merged.get_mut(key), value) {
            (Some(toml::Value::Array(mine)), toml::Value::Array(more))
                if lists.contains(&key.as_str()) =>
            {
                mine.extend(more.iter().cloned())
            }
            _ => {
                merged.insert(key.clone(), value.clone());
            }
        }
    }
    toml::Value::Table(merged).try_into().ok().or(Some(over))
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use crate::{ConfigFile, RootOverlay, SquashfsServer};

    fn parse(text: &str) -> ConfigFile {
        ConfigFile::parse(text, Path::new("test.toml")).unwrap()
    }

    /// A file's `[squashfs]` is checked as far as it goes alone: a level
    /// without a compressor waits for the merged settings (a site's xz, a
    /// user's level 0), a level with one is checked against it.
    #[test]
    fn a_files_squashfs_is_checked_as_far_as_it_goes() {
        let site = parse("[squashfs]\ncompressor = \"xz\"\n");
        let user = parse("[squashfs]\nlevel = 0\n");
        assert_eq!(site.merge(user).squashfs.unwrap().check(), Ok(()));
        let err = ConfigFile::parse(
            "[squashfs]\ncompressor = \"zstd\"\nlevel = 0\n",
            Path::new("u.toml"),
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("u.toml") && err.contains("use 1 to 22"),
            "{err}"
        );
    }

    /// A user's table changes the keys it sets and no other: before, a
    /// user's `[runtime]` dropped the site's server and overlay choices
    /// and a user's `[network]` reset the site's other network keys.
    #[test]
    fn tables_merge_key_by_key() {
        let site = parse(
            "[runtime]\nbinds = [\"/apps\"]\nsquashfs_server = \"squashfuse_ll\"\noverlay = \"fuse\"\nkeeper_idle_seconds = 60\n[network]\nmax_connections = 4\n[squashfs]\nlevel = 9\n",
        );
        let user = parse(
            "[runtime]\nbinds = [\"/scratch\"]\n[network]\nattempts = 3\n[squashfs]\ncompressor = \"gzip\"\n",
        );
        let merged = site.merge(user);
        let rt = merged.runtime.unwrap();
        assert_eq!(rt.binds, ["/apps", "/scratch"]);
        assert_eq!(rt.squashfs_server, SquashfsServer::SquashfuseLl);
        assert_eq!(rt.overlay, RootOverlay::Fuse);
        assert_eq!(rt.keeper_idle_seconds, 60);
        let net = merged.network.unwrap();
        assert_eq!((net.max_connections, net.attempts), (4, 3));
        let sq = merged.squashfs.unwrap();
        assert_eq!((sq.compressor.as_str(), sq.level), ("gzip", Some(9)));
        // A user file without the table (or no user file) keeps the site's.
        let kept = parse("[runtime]\nimage_mount = \"fuse\"\n[network]\nattempts = 2\n")
            .merge(ConfigFile::default());
        assert_eq!(kept.runtime.unwrap().image_mount, crate::ImageMount::Fuse);
        assert_eq!(kept.network.unwrap().attempts, 2);
        // A key the user sets wins.
        let user = parse("[runtime]\nkeeper_idle_seconds = 5\n");
        let rt = parse("[runtime]\nkeeper_idle_seconds = 60\n")
            .merge(user)
            .runtime
            .unwrap();
        assert_eq!(rt.keeper_idle_seconds, 5);
    }
}
