//! Finding and reading the benchmark scripts' JSON in `bench/results`.

use std::fs;
use std::path::{Path, PathBuf};

use serde_json::Value;

/// One result file, parsed.
#[derive(Debug, Clone)]
pub struct ResultFile {
    /// Where it was read from.
    pub path: PathBuf,
    /// Its content.
    pub json: Value,
}

impl ResultFile {
    /// The file name, for citing the source of a section.
    pub fn name(&self) -> String {
        self.path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default()
    }
}

/// Whether a result comes from a `--smoke` run.
pub fn is_smoke(v: &Value) -> bool {
    v.get("smoke").and_then(Value::as_bool).unwrap_or(true)
}

/// The newest `PREFIX<UTC>.json` in `dir` (names sort by time) whose
/// content `accept`s, full runs only unless `allow_smoke`.
pub fn newest(
    dir: &Path,
    prefix: &str,
    allow_smoke: bool,
    accept: impl Fn(&Value) -> bool,
) -> Option<ResultFile> {
    let mut files: Vec<PathBuf> = fs::read_dir(dir)
        .ok()?
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            let name = p.file_name().and_then(|n| n.to_str()).unwrap_or_default();
            name.strip_prefix(prefix)
                .is_some_and(|rest| rest.starts_with(|c: char| c.is_ascii_digit()))
                && name.ends_with(".json")
        })
        .collect();
    files.sort();
    files.into_iter().rev().find_map(|path| {
        let json: Value = serde_json::from_slice(&fs::read(&path).ok()?).ok()?;
        (json.is_object() && (allow_smoke || !is_smoke(&json)) && accept(&json))
            .then_some(ResultFile { path, json })
    })
}

/// `v[pointer]` as f64.
pub fn num(v: &Value, pointer: &str) -> Option<f64> {
    v.pointer(pointer).and_then(Value::as_f64)
}

/// `v[pointer]` as a string.
pub fn text<'a>(v: &'a Value, pointer: &str) -> Option<&'a str> {
    v.pointer(pointer).and_then(Value::as_str)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn newest_skips_smoke_and_other_prefixes() {
        let dir = std::env::temp_dir().join(format!("bench-report-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        fs::write(
            dir.join("start-20260101T000000Z.json"),
            r#"{"smoke":false,"n":1}"#,
        )
        .unwrap();
        fs::write(
            dir.join("start-20260102T000000Z.json"),
            r#"{"smoke":true,"n":2}"#,
        )
        .unwrap();
        fs::write(dir.join("start-x.json"), r#"{"smoke":false,"n":3}"#).unwrap();
        fs::write(
            dir.join("starter-20260103T000000Z.json"),
            r#"{"smoke":false}"#,
        )
        .unwrap();
        let full = newest(&dir, "start-", false, |_| true).unwrap();
        assert_eq!(num(&full.json, "/n"), Some(1.0));
        let any = newest(&dir, "start-", true, |_| true).unwrap();
        assert_eq!(num(&any.json, "/n"), Some(2.0));
        assert!(newest(&dir, "pull-", true, |_| true).is_none());
        fs::remove_dir_all(&dir).unwrap();
    }
}
