//! CUDA forward compatibility: a CUDA image may ship a newer user-space
//! driver than the node's in [`COMPAT_DIR`] (NVIDIA's `cuda-compat`
//! package, in every NGC image). Where that driver is newer than the
//! node's, a container loads it instead of the node's, as NVIDIA's
//! container toolkit and libnvidia-container arrange it, so that an image
//! built for CUDA 13 runs on a node whose driver predates it. The rule is
//! the toolkit's: the image's driver is used where its major version is
//! greater than the node's.

use crate::plan::Library;

/// Where CUDA images keep their forward-compatible driver.
pub const COMPAT_DIR: &str = "/usr/local/cuda/compat";

/// A driver version, `MAJOR.MINOR[.PATCH]`, compared by number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct DriverVersion(u32, u32, u32);

impl DriverVersion {
    /// The version a driver library's file name ends with
    /// (`libcuda.so.535.104.05`); `None` for a soname (`libcuda.so.1`) or
    /// any other name.
    pub fn of_file(name: &str) -> Option<DriverVersion> {
        let v = name.strip_prefix("libcuda.so.")?;
        let mut parts = v.split('.').map(|p| p.parse::<u32>().ok());
        let major = parts.next()??;
        let minor = parts.next()??;
        let patch = match parts.next() {
            Some(p) => p?,
            None => 0,
        };
        // Driver branches are numbered from 100 up: `libcuda.so.1.1` (WSL's
        // file) names none.
        if parts.next().is_some() || major < 100 {
            return None;
        }
        Some(DriverVersion(major, minor, patch))
    }

    /// The node's driver, from the libcuda an injection plan binds (its
    /// file, symlinks resolved, is named by its version).
    pub fn of_host(libraries: &[&Library]) -> Option<DriverVersion> {
        libraries
            .iter()
            .filter(|l| l.name.starts_with("libcuda.so."))
            .find_map(|l| DriverVersion::of_file(l.source.file_name()?.to_str()?))
    }

    /// The major version (the driver branch: 535, 580).
    pub fn major(self) -> u32 {
        self.0
    }
}

impl std::fmt::Display for DriverVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{:02}.{:02}", self.0, self.1, self.2)
    }
}

/// The image's forward-compatible driver among `names` (the entries of
/// its [`COMPAT_DIR`]), where it is to be used over `host`'s: its major
/// version is greater.
pub fn newer_than(host: DriverVersion, names: &[String]) -> Option<DriverVersion> {
    names
        .iter()
        .filter_map(|n| DriverVersion::of_file(n))
        .max()
        .filter(|image| image.major() > host.major())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_come_from_driver_file_names() {
        assert_eq!(
            DriverVersion::of_file("libcuda.so.535.104.05"),
            Some(DriverVersion(535, 104, 5))
        );
        assert_eq!(
            DriverVersion::of_file("libcuda.so.999.99"),
            Some(DriverVersion(999, 99, 0))
        );
        for not in [
            "libcuda.so.1",
            "libcuda.so",
            "libcuda.so.5.x",
            "libnvidia-ml.so.535.104.05",
            "libcuda.so.1.2.3.4",
            "libcuda.so.1.1",
        ] {
            assert_eq!(DriverVersion::of_file(not), None, "{not}");
        }
        assert_eq!(DriverVersion(535, 104, 5).to_string(), "535.104.05");
    }

    #[test]
    fn an_image_driver_of_a_later_branch_is_used() {
        let names = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let host = DriverVersion(535, 104, 5);
        let ngc = names(&[
            "libcuda.so",
            "libcuda.so.1",
            "libcuda.so.580.65.06",
            "libnvidia-nvvm.so.4",
        ]);
        assert_eq!(newer_than(host, &ngc), Some(DriverVersion(580, 65, 6)));
        // The same branch, or an older one: the node's driver serves.
        assert_eq!(newer_than(host, &names(&["libcuda.so.535.183.01"])), None);
        assert_eq!(newer_than(DriverVersion(590, 1, 0), &ngc), None);
        assert_eq!(newer_than(host, &names(&["libcuda.so.1"])), None);
    }
}
