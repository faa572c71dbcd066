//! Platforms (`os/arch[/variant]`) and choosing one from an image index.

use std::fmt;

use oci_spec::image::{Arch, Descriptor, Os};

use crate::error::{Error, Result};

/// An OCI platform.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Platform {
    /// `linux`, ...
    pub os: String,
    /// `amd64`, `arm64`, ... (GOARCH names).
    pub arch: String,
    /// `v7`, `v8`, ... when it matters.
    pub variant: Option<String>,
}

impl Platform {
    /// Parses `os/arch[/variant]`.
    pub fn parse(text: &str) -> Result<Self> {
        let parts: Vec<&str> = text.split('/').collect();
        let bad = || Error::Reference {
            reference: text.to_string(),
            reason: "a platform is os/arch[/variant], e.g. linux/amd64 or linux/arm/v7".to_string(),
        };
        match parts.as_slice() {
            [os, arch] if !os.is_empty() && !arch.is_empty() => Ok(Self {
                os: os.to_string(),
                arch: arch.to_string(),
                variant: None,
            }),
            [os, arch, v] if !os.is_empty() && !arch.is_empty() && !v.is_empty() => Ok(Self {
                os: os.to_string(),
                arch: arch.to_string(),
                variant: Some(v.to_string()),
            }),
            _ => Err(bad()),
        }
    }

    /// The platform this process runs on.
    pub fn host() -> Self {
        let (arch, variant) = match std::env::consts::ARCH {
            "x86_64" => ("amd64", None),
            "aarch64" => ("arm64", None),
            "arm" => ("arm", Some("v7")),
            "x86" => ("386", None),
            "powerpc64" => ("ppc64le", None),
            "riscv64" => ("riscv64", None),
            "s390x" => ("s390x", None),
            "loongarch64" => ("loong64", None),
            other => (other, None),
        };
        Self {
            os: std::env::consts::OS.to_string(),
            arch: arch.to_string(),
            variant: variant.map(str::to_string),
        }
    }

    fn matches(&self, os: &str, arch: &str, variant: Option<&str>) -> bool {
        if self.os != os || self.arch != arch {
            return false;
        }
        match (&self.variant, variant) {
            (None, _) => true,
            (Some(want), Some(have)) => want == have,
            // arm64 images often omit "v8".
            (Some(want), None) => self.arch == "arm64" && want == "v8",
        }
    }
}

impl fmt::Display for Platform {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.os, self.arch)?;
        if let Some(v) = &self.variant {
            write!(f, "/{v}")?;
        }
        Ok(())
    }
}

fn arch_name(a: &Arch) -> String {
    a.to_string()
}

fn os_name(o: &Os) -> String {
    o.to_string()
}

/// Picks the manifest for `want` from an index's descriptors; the error
/// lists what the index offers.
pub fn select<'a>(
    reference: &str,
    manifests: &'a [Descriptor],
    want: &Platform,
) -> Result<&'a Descriptor> {
    let mut candidates: Vec<&Descriptor> = manifests
        .iter()
        .filter(|d| {
            d.platform().as_ref().is_some_and(|p| {
                want.matches(
                    &os_name(p.os()),
                    &arch_name(p.architecture()),
                    p.variant().as_deref(),
                )
            })
        })
        .collect();
    // Without a wanted variant, prefer the plainest (no variant, else the highest).
    candidates.sort_by_key(|d| {
        d.platform()
            .as_ref()
            .and_then(|p| p.variant().clone())
            .map(std::cmp::Reverse)
    });
    if let Some(first) = candidates.first() {
        return Ok(first);
    }
    let available: Vec<String> = manifests
        .iter()
        .filter_map(|d| d.platform().as_ref())
        .map(|p| {
            let mut s = format!("{}/{}", os_name(p.os()), arch_name(p.architecture()));
            if let Some(v) = p.variant() {
                s.push('/');
                s.push_str(v);
            }
            s
        })
        .filter(|s| s != "unknown/unknown")
        .collect();
    Err(Error::NoPlatform {
        reference: reference.to_string(),
        wanted: want.to_string(),
        available: if available.is_empty() {
            "none".to_string()
        } else {
            available.join(", ")
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn index() -> Vec<Descriptor> {
        let json = r#"[
          {"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:1111111111111111111111111111111111111111111111111111111111111111","size":1,"platform":{"os":"linux","architecture":"amd64"}},
          {"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:2222222222222222222222222222222222222222222222222222222222222222","size":1,"platform":{"os":"linux","architecture":"arm","variant":"v7"}},
          {"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:3333333333333333333333333333333333333333333333333333333333333333","size":1,"platform":{"os":"linux","architecture":"arm64","variant":"v8"}},
          {"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:4444444444444444444444444444444444444444444444444444444444444444","size":1,"platform":{"os":"unknown","architecture":"unknown"}}
        ]"#;
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn selects_by_platform() {
        let idx = index();
        let pick = |p: &str| {
            select("r", &idx, &Platform::parse(p).unwrap())
                .unwrap()
                .digest()
                .to_string()
        };
        assert!(pick("linux/amd64").contains("1111"));
        assert!(pick("linux/arm/v7").contains("2222"));
        assert!(pick("linux/arm64").contains("3333"));
        assert!(pick("linux/arm64/v8").contains("3333"));
        let err = select("r", &idx, &Platform::parse("linux/ppc64le").unwrap())
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("linux/amd64, linux/arm/v7, linux/arm64/v8"),
            "{err}"
        );
    }

    #[test]
    fn parses() {
        assert_eq!(
            Platform::parse("linux/arm/v7").unwrap().to_string(),
            "linux/arm/v7"
        );
        assert!(Platform::parse("linux").is_err());
        assert!(Platform::parse("linux/").is_err());
        assert_eq!(Platform::host().os, "linux");
    }
}
