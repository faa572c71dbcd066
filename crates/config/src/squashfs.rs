//! `[squashfs]`: how new images' squashfs files are written.

use serde::{Deserialize, Serialize};

/// Squashfs writer settings for images in the store.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SquashfsSettings {
    /// Block compressor: `zstd`, `lz4`, `gzip`, `xz`, `lzo`.
    #[serde(default = "default_compressor")]
    pub compressor: String,
    /// Compression level where the compressor has one (zstd, gzip, xz);
    /// unset: 3 for zstd (berth's default: fast to write, about as small
    /// as higher levels for software images), the compressor's own for
    /// the others.
    #[serde(default)]
    pub level: Option<u32>,
    /// Data block size in bytes (4 KiB to 1 MiB, a power of two).
    #[serde(default = "default_block_size")]
    pub block_size: u32,
}

fn default_compressor() -> String {
    "zstd".to_string()
}

fn default_block_size() -> u32 {
    128 * 1024
}

impl SquashfsSettings {
    /// The level the writer is given: [`Self::level`], else 3 for zstd.
    pub fn effective_level(&self) -> Option<u32> {
        self.level
            .or_else(|| (self.compressor == "zstd").then_some(3))
    }
}

impl Default for SquashfsSettings {
    fn default() -> Self {
        Self {
            compressor: default_compressor(),
            level: Some(3),
            block_size: default_block_size(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> SquashfsSettings {
        toml::from_str(text).unwrap()
    }

    /// zstd without a level gets berth's 3 (tar2sqfs's own is 15: slow);
    /// other compressors keep their own; a level given is taken.
    #[test]
    fn the_level_without_one_given() {
        assert_eq!(SquashfsSettings::default().effective_level(), Some(3));
        assert_eq!(parse("compressor = \"zstd\"").effective_level(), Some(3));
        assert_eq!(parse("compressor = \"gzip\"").effective_level(), None);
        assert_eq!(
            parse("compressor = \"zstd\"\nlevel = 19").effective_level(),
            Some(19)
        );
    }
}
