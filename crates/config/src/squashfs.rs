//! `[squashfs]`: how new images' squashfs files are written.

use serde::{Deserialize, Serialize};

/// Squashfs writer settings for images in the store.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SquashfsSettings {
    /// Block compressor: `zstd`, `lz4`, `gzip`, `xz`, `lzo`.
    #[serde(default = "default_compressor")]
    pub compressor: String,
    /// Compression level where the compressor has one (zstd 1 to 22, gzip
    /// 1 to 9, xz 0 to 9; checked when the file is read); unset: 3 for
    /// zstd (berth's default: fast to write, about as small as higher
    /// levels for software images), the compressor's own for the others.
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

/// The compressors berth writes with, as tar2sqfs names them.
pub const COMPRESSORS: [&str; 5] = ["zstd", "lz4", "gzip", "xz", "lzo"];

impl SquashfsSettings {
    /// Why these settings cannot be written (what to use instead), checked
    /// when a config file is read and again on the merged settings before
    /// a pull downloads anything. A level is checked against the
    /// compressor's range (tar2sqfs's: zstd 1 to 22, gzip 1 to 9, xz 0 to
    /// 9); lz4 and lzo have none, and one given is not used.
    pub fn check(&self) -> Result<(), String> {
        let c = self.compressor.as_str();
        if !COMPRESSORS.contains(&c) {
            return Err(format!(
                "squashfs compressor {c:?} is not supported; use one of {}",
                COMPRESSORS.join(", ")
            ));
        }
        let bs = self.block_size;
        if !(4096..=1 << 20).contains(&bs) || !bs.is_power_of_two() {
            return Err(format!(
                "squashfs block size {bs} is invalid: use a power of two from 4096 to 1048576"
            ));
        }
        let range = match c {
            "zstd" => 1..=22,
            "gzip" => 1..=9,
            "xz" => 0..=9,
            _ => return Ok(()),
        };
        match self.level {
            Some(l) if !range.contains(&l) => Err(format!(
                "squashfs level {l} is out of range for {c}: use {} to {} (or leave `level` out)",
                range.start(),
                range.end()
            )),
            _ => Ok(()),
        }
    }

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

    /// Each compressor's level range; unknown compressors and bad block
    /// sizes are refused.
    #[test]
    fn the_settings_are_checked() {
        for ok in [
            "",
            "level = 22",
            "compressor = \"gzip\"\nlevel = 9",
            "compressor = \"xz\"\nlevel = 0",
            "compressor = \"lz4\"\nlevel = 99",
            "block_size = 1048576",
        ] {
            assert_eq!(parse(ok).check(), Ok(()), "{ok}");
        }
        for (bad, says) in [
            (
                "level = 23",
                "level 23 is out of range for zstd: use 1 to 22",
            ),
            ("level = 0", "out of range for zstd"),
            ("compressor = \"gzip\"\nlevel = 19", "use 1 to 9"),
            ("compressor = \"xz\"\nlevel = 10", "use 0 to 9"),
            ("compressor = \"brotli\"", "not supported; use one of zstd"),
            ("block_size = 3000", "block size 3000 is invalid"),
        ] {
            let err = parse(bad).check().unwrap_err();
            assert!(err.contains(says), "{bad}: {err}");
        }
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
