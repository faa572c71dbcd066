//! `[layer_cache]`: the store's cache of pulled layer blobs.
//!
//! ```toml
//! [layer_cache]
//! enabled = true      # keep pulled layers for later pulls (default)
//! max_size = "200G"   # least recently used layers go first beyond this
//! ```

use serde::{Deserialize, Deserializer};

/// Settings of the layer cache (`[layer_cache]`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, serde::Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct LayerCacheSettings {
    /// Whether pulled layers are kept (`enabled = false`, like
    /// `berth pull --no-layer-cache`, keeps only the squashfs images).
    pub enabled: bool,
    /// The cache's size cap: a string with a binary suffix (`"200G"`,
    /// `"500M"`) or an integer number of bytes; none by default.
    #[serde(deserialize_with = "size")]
    #[schemars(with = "Option<String>")]
    pub max_size: Option<u64>,
}

impl Default for LayerCacheSettings {
    /// Enabled, no cap.
    fn default() -> Self {
        Self {
            enabled: true,
            max_size: None,
        }
    }
}

/// Parses a size: a number of bytes, or a number with a binary suffix
/// K, M, G or T (an optional `B` or `iB` after it).
pub fn parse_size(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let t = t
        .strip_suffix("iB")
        .or_else(|| t.strip_suffix('B'))
        .unwrap_or(t);
    let (digits, shift) = match t.chars().last() {
        Some('K' | 'k') => (&t[..t.len() - 1], 10),
        Some('M' | 'm') => (&t[..t.len() - 1], 20),
        Some('G' | 'g') => (&t[..t.len() - 1], 30),
        Some('T' | 't') => (&t[..t.len() - 1], 40),
        _ => (t, 0),
    };
    let n: u64 = digits.trim().parse().map_err(|_| {
        format!("{text:?} is not a size (a number of bytes, or a number with K, M, G or T)")
    })?;
    n.checked_mul(1u64 << shift)
        .ok_or_else(|| format!("{text:?} is too large"))
}

fn size<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Size {
        Bytes(u64),
        Text(String),
    }
    match Size::deserialize(d)? {
        Size::Bytes(n) => Ok(Some(n)),
        Size::Text(t) => parse_size(&t).map(Some).map_err(serde::de::Error::custom),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("123"), Ok(123));
        assert_eq!(parse_size("4K"), Ok(4096));
        assert_eq!(parse_size("200G"), Ok(200 << 30));
        assert_eq!(parse_size("1 TiB"), Ok(1 << 40));
        assert_eq!(parse_size("500MB"), Ok(500 << 20));
        assert!(parse_size("lots").is_err());
        assert!(parse_size("-1G").is_err());
        assert!(parse_size("99999999999T").is_err());
    }

    #[test]
    fn table() {
        let s: LayerCacheSettings = toml::from_str("max_size = \"2G\"").unwrap();
        assert_eq!(
            s,
            LayerCacheSettings {
                enabled: true,
                max_size: Some(2 << 30)
            }
        );
        let s: LayerCacheSettings = toml::from_str("enabled = false\nmax_size = 1000").unwrap();
        assert_eq!(
            s,
            LayerCacheSettings {
                enabled: false,
                max_size: Some(1000)
            }
        );
        let s: LayerCacheSettings = toml::from_str("").unwrap();
        assert_eq!(s, LayerCacheSettings::default());
        assert!(toml::from_str::<LayerCacheSettings>("max_size = \"big\"").is_err());
    }
}
