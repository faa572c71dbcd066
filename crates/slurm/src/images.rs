//! How the plugin tells the forms of `--container-image` apart: a file, a
//! registry reference, an id, or a short name.

/// Whether an image reference names a registry (it is pulled for the job,
/// so the tag's current digest is used) rather than an image already in
/// the store: the same rule as `berth run`'s, and enroot's
/// `REGISTRY#IMAGE` and `docker://REF` (berth reads both).
pub fn names_registry(image: &str) -> bool {
    let first = image.split('/').next().unwrap_or_default();
    image.contains('#')
        || image.starts_with("docker://")
        || image.contains('/')
            && (first.contains('.') || first.contains(':') || first == "localhost")
}

/// Whether `image` is an image id or an id's prefix (`sha256:...`, 12 or
/// more lowercase hex digits): looked up in the store, never pulled.
pub fn looks_like_id(image: &str) -> bool {
    let hex = image.strip_prefix("sha256:").unwrap_or(image);
    image.starts_with("sha256:")
        || (hex.len() >= 12
            && hex
                .chars()
                .all(|c| c.is_ascii_digit() || ('a'..='f').contains(&c)))
}

/// Whether the image names a SIF or squashfs file rather than a reference:
/// it starts with `/` or `.` (Pyxis's rule: `./pytorch.sqsh`,
/// `/scratch/app.sif`). berth serves such a file in place.
pub fn names_a_file(image: &str) -> bool {
    image.starts_with('/') || image.starts_with('.')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registry_references() {
        assert!(names_registry("127.0.0.1:5000/a/b:1"));
        assert!(names_registry("docker.io/library/debian"));
        assert!(!names_registry("debian:12"));
        assert!(!names_registry("sha256:abcd"));
        assert!(names_registry("nvcr.io#nvidia/pytorch:24.01-py3"));
        assert!(names_registry("docker://ubuntu:24.04"));
        assert!(names_a_file("./pytorch.sqsh") && names_a_file("/scratch/a.sif"));
        assert!(!names_a_file("ubuntu:24.04"));
        assert!(looks_like_id("sha256:ab") && looks_like_id("0123456789abcdef"));
        assert!(!looks_like_id("ubuntu") && !looks_like_id("deadbeef"));
    }
}
