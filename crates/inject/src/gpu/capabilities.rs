//! Which parts of the NVIDIA driver a container gets, as
//! `NVIDIA_DRIVER_CAPABILITIES` names them for NVIDIA's container toolkit
//! and enroot's hook: `compute` (libcuda and what it loads), `utility`
//! (nvidia-smi and NVML), `video`, `graphics`, `ngx`, `display` and
//! `compat32`, or `all`. The libraries of each are the toolkit's
//! (libnvidia-container's `nvc_info.c`). berth gives only the node's
//! native libraries, so `compat32` and `display` add nothing.

use crate::error::InjectError;

/// One capability.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Capability {
    Compute,
    Utility,
    Video,
    Graphics,
    Ngx,
    Display,
    Compat32,
}

impl Capability {
    const ALL: [Capability; 7] = [
        Capability::Compute,
        Capability::Utility,
        Capability::Video,
        Capability::Graphics,
        Capability::Ngx,
        Capability::Display,
        Capability::Compat32,
    ];

    fn name(self) -> &'static str {
        match self {
            Capability::Compute => "compute",
            Capability::Utility => "utility",
            Capability::Video => "video",
            Capability::Graphics => "graphics",
            Capability::Ngx => "ngx",
            Capability::Display => "display",
            Capability::Compat32 => "compat32",
        }
    }

    fn bit(self) -> u8 {
        1 << (self as u8)
    }

    /// Sonames (prefixes) of the driver's libraries it gives.
    fn libraries(self) -> &'static [&'static str] {
        match self {
            Capability::Compute => &[
                "libcuda.so",
                "libcudadebugger.so",
                "libnvidia-opencl.so",
                "libnvidia-gpucomp.so",
                "libnvidia-ptxjitcompiler.so",
                "libnvidia-fatbinaryloader.so",
                "libnvidia-allocator.so",
                "libnvidia-compiler.so",
                "libnvidia-pkcs11",
                "libnvidia-nvvm.so",
                "libnvidia-tileiras.so",
            ],
            Capability::Utility => &["libnvidia-ml.so", "libnvidia-cfg.so", "libnvidia-nscq.so"],
            Capability::Video => &[
                "libvdpau_nvidia.so",
                "libnvidia-encode.so",
                "libnvidia-opticalflow.so",
                "libnvcuvid.so",
            ],
            Capability::Graphics => &[
                "libnvidia-eglcore.so",
                "libnvidia-glcore.so",
                "libnvidia-tls.so",
                "libnvidia-glsi.so",
                "libnvidia-fbc.so",
                "libnvidia-ifr.so",
                "libnvidia-rtcore.so",
                "libnvoptix.so",
                "libGLX_nvidia.so",
                "libEGL_nvidia.so",
                "libGLESv2_nvidia.so",
                "libGLESv1_CM_nvidia.so",
                "libnvidia-glvkspirv.so",
                "libnvidia-cbl.so",
            ],
            Capability::Ngx => &["libnvidia-ngx.so"],
            Capability::Display | Capability::Compat32 => &[],
        }
    }

    /// The driver's programs it gives.
    fn programs(self) -> &'static [&'static str] {
        match self {
            Capability::Utility => &["nvidia-smi", "nvidia-debugdump", "nvidia-persistenced"],
            Capability::Compute => &["nvidia-cuda-mps-control", "nvidia-cuda-mps-server"],
            _ => &[],
        }
    }
}

/// `NVIDIA_DRIVER_CAPABILITIES` as a run asks: read only where berth
/// finds an NVIDIA driver itself (a CDI spec names its own libraries, and
/// AMD has no such variable), so that a value there is no error elsewhere.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Asked {
    /// The variable's value, where set.
    pub value: Option<String>,
    /// What an unset or empty variable gives.
    pub unset: Capabilities,
}

impl Asked {
    /// The variable of `caller` (the task's environment), else of `image`
    /// (its ENV: CUDA images set `compute,utility`), with `unset` where
    /// neither sets it.
    pub fn from_environment(
        caller: &[(String, String)],
        image: &[(String, String)],
        unset: Capabilities,
    ) -> Asked {
        let name = "NVIDIA_DRIVER_CAPABILITIES";
        Asked {
            value: super::var(caller, name)
                .or_else(|| super::var(image, name))
                .map(str::to_string),
            unset,
        }
    }

    /// The capabilities asked for; an error for a word that names none.
    pub fn resolve(&self) -> Result<Capabilities, InjectError> {
        match &self.value {
            Some(v) => Ok(Capabilities::parse(v)?.unwrap_or(self.unset)),
            None => Ok(self.unset),
        }
    }
}

/// A set of driver capabilities.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Capabilities(u8);

impl Default for Capabilities {
    /// Every capability: what `--gpus` gives where nothing names them.
    fn default() -> Self {
        Capabilities::ALL
    }
}

impl Capabilities {
    /// Every capability (`all`).
    pub const ALL: Capabilities = Capabilities(0x7f);

    /// What enroot's hook gives where `NVIDIA_DRIVER_CAPABILITIES` is
    /// unset: `utility` (nvidia-smi and NVML, no CUDA driver).
    pub const ENROOT_DEFAULT: Capabilities = Capabilities(1 << Capability::Utility as u8);

    /// Parses `all` or a comma-separated list of capabilities; `None`
    /// where `s` is empty (unset: the caller's default applies).
    pub fn parse(s: &str) -> Result<Option<Capabilities>, InjectError> {
        let mut bits = 0;
        for word in s.split(',').map(str::trim).filter(|w| !w.is_empty()) {
            if word == "all" {
                bits |= Capabilities::ALL.0;
                continue;
            }
            let cap = Capability::ALL
                .into_iter()
                .find(|c| c.name() == word)
                .ok_or_else(|| InjectError::DriverCapabilities {
                    value: s.to_string(),
                    reason: format!(
                        "{word:?} is not a driver capability (known: all, {})",
                        Capability::ALL.map(Capability::name).join(", ")
                    ),
                })?;
            bits |= cap.bit();
        }
        Ok((bits != 0).then_some(Capabilities(bits)))
    }

    fn each(self) -> impl Iterator<Item = Capability> {
        Capability::ALL
            .into_iter()
            .filter(move |c| self.0 & c.bit() != 0)
    }

    /// Sonames (prefixes) of the driver's libraries these give.
    pub fn libraries(self) -> Vec<&'static str> {
        self.each().flat_map(|c| c.libraries()).copied().collect()
    }

    /// The driver's programs these give.
    pub fn programs(self) -> Vec<&'static str> {
        self.each().flat_map(|c| c.programs()).copied().collect()
    }

    /// Whether these give CUDA programs their driver (`compute`).
    pub fn compute(self) -> bool {
        self.0 & Capability::Compute.bit() != 0
    }

    /// As `NVIDIA_DRIVER_CAPABILITIES` spells them.
    pub fn as_env(self) -> String {
        if self == Capabilities::ALL {
            return "all".into();
        }
        self.each()
            .map(Capability::name)
            .collect::<Vec<_>>()
            .join(",")
    }
}

#[cfg(test)]
mod tests {
    use super::super::environment_tests::env;
    use super::*;

    #[test]
    fn lists_parse_to_their_libraries_and_programs() {
        let c = Capabilities::parse("utility, compute").unwrap().unwrap();
        assert!(c.compute());
        assert_eq!(c.as_env(), "compute,utility");
        let libs = c.libraries();
        assert!(libs.contains(&"libcuda.so") && libs.contains(&"libnvidia-ml.so"));
        assert!(!libs.contains(&"libnvcuvid.so"));
        assert_eq!(
            c.programs(),
            [
                "nvidia-cuda-mps-control",
                "nvidia-cuda-mps-server",
                "nvidia-smi",
                "nvidia-debugdump",
                "nvidia-persistenced"
            ]
        );
        let u = Capabilities::ENROOT_DEFAULT;
        assert!(!u.compute() && !u.libraries().contains(&"libcuda.so"));
        assert_eq!(u.as_env(), "utility");
        assert_eq!(Capabilities::parse("all").unwrap(), Some(Capabilities::ALL));
        assert_eq!(
            Capabilities::parse("video,all").unwrap().unwrap().as_env(),
            "all"
        );
        assert_eq!(Capabilities::parse("").unwrap(), None);
        assert_eq!(Capabilities::parse(" , ").unwrap(), None);
        let err = Capabilities::parse("compute,gpu").unwrap_err().to_string();
        assert!(err.contains("\"gpu\" is not a driver capability"), "{err}");
        assert!(
            err.contains("NVIDIA_DRIVER_CAPABILITIES=compute,gpu"),
            "{err}"
        );
    }

    #[test]
    fn the_task_wins_over_the_image() {
        let image = env(&[("NVIDIA_DRIVER_CAPABILITIES", "compute,utility")]);
        let task = env(&[("NVIDIA_DRIVER_CAPABILITIES", "video")]);
        let got = |c: &[(String, String)], i: &[(String, String)]| {
            Asked::from_environment(c, i, Capabilities::ENROOT_DEFAULT)
                .resolve()
                .unwrap()
                .as_env()
        };
        assert_eq!(got(&[], &image), "compute,utility");
        assert_eq!(got(&task, &image), "video");
        assert_eq!(got(&[], &[]), "utility");
        let empty = env(&[("NVIDIA_DRIVER_CAPABILITIES", "")]);
        assert_eq!(got(&empty, &image), "utility");
        // A bad value is an error only once it is read.
        let bad = Asked::from_environment(
            &env(&[("NVIDIA_DRIVER_CAPABILITIES", "gpu")]),
            &[],
            Capabilities::ALL,
        );
        assert!(bad.resolve().is_err());
    }
}
