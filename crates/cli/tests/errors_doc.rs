//! docs/errors.md against berth's error types (issue 21, "Errors"): every
//! variant of the error enums listed in [`TYPES`] has a `### Variant` entry
//! under its type's `## crate::Type` section of the guide, and no entry
//! names a variant that no longer exists. A failure names each missing or
//! stale entry.
//!
//! The enums are read from their source files with a small line parser
//! (std only): after the line `pub enum NAME {`, a line at the variants'
//! indentation that starts with an identifier followed by `{`, `(` or `,`
//! starts a variant, up to the enum's closing `}`. Doc comments are
//! skipped; attributes, also those that span several lines (`#[error(` /
//! `"..."` / `)]`), are read to their closing `]`, with string literals
//! skipped. A variant whose attributes include `#[error(transparent)]`
//! only passes another error's message on: it needs no entry (an entry for
//! it is not stale either).

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// The documented error types: the guide's section title, the source file
/// (relative to this crate's directory) and the enum's name there.
const TYPES: &[(&str, &str, &str)] = &[
    (
        "berth_config::ConfigError",
        "../config/src/lib.rs",
        "ConfigError",
    ),
    ("berth_image::Error", "../image/src/error.rs", "Error"),
    (
        "berth_inject::InjectError",
        "../inject/src/error.rs",
        "InjectError",
    ),
    ("berth_runtime::Error", "../runtime/src/error.rs", "Error"),
    (
        "berth_runtime::semantics::SemanticsError",
        "../runtime/src/semantics.rs",
        "SemanticsError",
    ),
    ("berth_engine::Error", "../engine/src/error.rs", "Error"),
    ("berth_build::Error", "../build/src/lib.rs", "Error"),
    (
        "berth_build::worker::InImageError",
        "../build/src/worker/error.rs",
        "InImageError",
    ),
    (
        "berth_build::worker::UserError",
        "../build/src/worker/error.rs",
        "UserError",
    ),
];

/// The guide, relative to this crate's directory.
const GUIDE: &str = "../../docs/errors.md";

/// A variant of an error enum.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Variant {
    name: String,
    /// Marked `#[error(transparent)]`: it only wraps another error.
    transparent: bool,
}

/// Reads an attribute that may span lines: bracket depth outside string
/// literals, and whether a string literal is open.
#[derive(Debug, Default)]
struct AttrScan {
    depth: usize,
    in_str: bool,
    escaped: bool,
    text: String,
}

impl AttrScan {
    /// Whether an attribute (or a string literal in it) is still open.
    fn busy(&self) -> bool {
        self.depth > 0 || self.in_str
    }

    /// Reads `line` as part of an attribute. When the attribute closes on
    /// this line: its text and the rest of the line after it.
    fn feed(&mut self, line: &str) -> Option<(String, String)> {
        for (i, c) in line.char_indices() {
            self.text.push(c);
            if self.in_str {
                if self.escaped {
                    self.escaped = false;
                } else if c == '\\' {
                    self.escaped = true;
                } else if c == '"' {
                    self.in_str = false;
                }
                continue;
            }
            match c {
                '"' => self.in_str = true,
                '[' => self.depth += 1,
                ']' => {
                    self.depth = self.depth.saturating_sub(1);
                    if self.depth == 0 {
                        let rest = line[i + c.len_utf8()..].to_string();
                        return Some((std::mem::take(&mut self.text), rest));
                    }
                }
                _ => {}
            }
        }
        // A `\` at the end of a line escapes the line break.
        self.escaped = false;
        self.text.push('\n');
        None
    }
}

/// The number of leading blanks of `line`.
fn indent(line: &str) -> usize {
    line.len() - line.trim_start().len()
}

/// The variant `trimmed` starts, if it starts one: an identifier followed
/// by `{`, `(`, `,` (or `=`, or nothing).
fn variant_start(trimmed: &str) -> Option<String> {
    let end = trimmed
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(trimmed.len());
    let ident = &trimmed[..end];
    let first = ident.chars().next()?;
    if !(first.is_ascii_alphabetic() || first == '_') {
        return None;
    }
    match trimmed[end..].trim_start().chars().next() {
        Some('{' | '(' | ',' | '=') | None => Some(ident.to_string()),
        Some(_) => None,
    }
}

/// Whether an attribute's text is `#[error(transparent)]`.
fn is_transparent(attr: &str) -> bool {
    let compact: String = attr.chars().filter(|c| !c.is_whitespace()).collect();
    compact.contains("#[error(transparent)]")
}

/// The variants of `pub enum NAME` in `source`, in order.
fn variants(source: &str, name: &str) -> Result<Vec<Variant>, String> {
    let header = format!("pub enum {name} {{");
    let mut lines = source.lines();
    let enum_indent = loop {
        match lines.next() {
            Some(line) if line.trim() == header => break indent(line),
            Some(_) => {}
            None => return Err(format!("no line `{header}`")),
        }
    };
    let mut out = Vec::new();
    let mut level: Option<usize> = None;
    let mut attrs: Vec<String> = Vec::new();
    let mut scan = AttrScan::default();
    // Whether the attribute being read is a variant's (not a field's).
    let mut keep = false;
    for line in lines {
        let rest = if scan.busy() {
            match scan.feed(line) {
                Some((attr, rest)) => {
                    if keep {
                        attrs.push(attr);
                    }
                    rest
                }
                None => continue,
            }
        } else {
            line.to_string()
        };
        let trimmed = rest.trim();
        if trimmed.is_empty() || trimmed.starts_with("//") {
            continue;
        }
        // Indentation counts for whole lines only (not for the rest of a
        // line after an attribute).
        let ind = if rest.len() == line.len() {
            indent(line)
        } else {
            level.unwrap_or(0)
        };
        if ind <= enum_indent && trimmed.starts_with('}') {
            return Ok(out);
        }
        let level = *level.get_or_insert(ind);
        if trimmed.starts_with('#') {
            keep = ind == level;
            if let Some((attr, after)) = scan.feed(trimmed) {
                if keep {
                    attrs.push(attr);
                    if let Some(v) = variant_start(after.trim()) {
                        let transparent = attrs.iter().any(|a| is_transparent(a));
                        out.push(Variant {
                            name: v,
                            transparent,
                        });
                        attrs.clear();
                    }
                }
            }
            continue;
        }
        if ind != level {
            // A field of a struct variant, or its doc comment.
            continue;
        }
        if let Some(v) = variant_start(trimmed) {
            let transparent = attrs.iter().any(|a| is_transparent(a));
            out.push(Variant {
                name: v,
                transparent,
            });
        }
        attrs.clear();
    }
    Err(format!("`{header}` has no closing `}}`"))
}

/// The text of a heading: trimmed, without surrounding backticks.
fn heading_text(s: &str) -> String {
    s.trim().trim_matches('`').trim().to_string()
}

/// The guide's `## TITLE` sections with the `### NAME` headings in each
/// (outside code fences), and the titles that appear more than once.
fn sections(guide: &str) -> (BTreeMap<String, Vec<String>>, Vec<String>) {
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut twice = Vec::new();
    let mut current: Option<String> = None;
    let mut fenced = false;
    for line in guide.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        if let Some(title) = line.strip_prefix("## ") {
            let title = heading_text(title);
            if out.contains_key(&title) {
                twice.push(title.clone());
            }
            out.entry(title.clone()).or_default();
            current = Some(title);
        } else if let Some(name) = line.strip_prefix("### ") {
            if let Some(title) = &current {
                out.entry(title.clone())
                    .or_default()
                    .push(heading_text(name));
            }
        } else if line.starts_with("# ") {
            current = None;
        }
    }
    (out, twice)
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
}

#[test]
fn every_error_variant_has_an_entry_in_the_guide() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let guide = read(&root.join(GUIDE));
    let (sections, twice) = sections(&guide);
    let mut problems: Vec<String> = twice
        .iter()
        .map(|t| format!("section `## {t}` appears more than once"))
        .collect();
    for (title, file, name) in TYPES {
        let source = read(&root.join(file));
        let all = match variants(&source, name) {
            Ok(v) if v.is_empty() => {
                problems.push(format!(
                    "{file}: no variants found in enum {name} (does this test's parser need updating?)"
                ));
                continue;
            }
            Ok(v) => v,
            Err(e) => {
                problems.push(format!("{file}: enum {name}: {e}"));
                continue;
            }
        };
        let Some(headings) = sections.get(*title) else {
            problems.push(format!(
                "no section `## {title}` (for enum {name} in {file})"
            ));
            continue;
        };
        for v in all.iter().filter(|v| !v.transparent) {
            if !headings.contains(&v.name) {
                problems.push(format!(
                    "missing: `## {title}` has no `### {}` (variant {name}::{} in {file})",
                    v.name, v.name
                ));
            }
        }
        let known: BTreeSet<&str> = all.iter().map(|v| v.name.as_str()).collect();
        let mut seen = BTreeSet::new();
        for h in headings {
            if !known.contains(h.as_str()) {
                problems.push(format!(
                    "stale: `## {title}` has `### {h}`, but enum {name} in {file} has no variant {h}"
                ));
            }
            if !seen.insert(h.as_str()) {
                problems.push(format!("`## {title}` has `### {h}` more than once"));
            }
        }
    }
    // A section for an error type (`crate::Type`) this test does not check.
    let checked: BTreeSet<&str> = TYPES.iter().map(|t| t.0).collect();
    for title in sections.keys() {
        if title.contains("::") && !checked.contains(title.as_str()) {
            problems.push(format!(
                "section `## {title}` is not checked: add its enum to TYPES in crates/cli/tests/errors_doc.rs, or remove the section"
            ));
        }
    }
    assert!(
        problems.is_empty(),
        "docs/errors.md and the error types differ:\n  {}",
        problems.join("\n  ")
    );
}

/// The parser on the shapes rustfmt gives the error enums: struct, tuple
/// and unit variants, field attributes, attributes over several lines with
/// brackets and quotes in their strings, `#[error(transparent)]`.
#[test]
fn the_parser_reads_variants_as_rustfmt_writes_them() {
    let source = r##"
/// Not this one.
pub enum ErrorClass {
    Usage,
}

/// The one.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A struct variant: its fields are not variants.
    #[error("cannot {what} {path}: {source}")]
    Io {
        /// What was being done.
        what: &'static str,
        #[source]
        source: std::io::Error,
    },
    /// An attribute over several lines.
    #[error(
        "the [host] table ({known}) )] \"quoted\"; see [modules.{name}]"
    )]
    Spread {
        /// The name.
        name: String,
    },
    /// Wraps another error.
    #[error(transparent)]
    Wrapped(#[from] std::io::Error),
    #[error(
        transparent
    )]
    AlsoWrapped(std::fmt::Error),
    /// A tuple variant.
    #[error("{0}")]
    Text(String),
    /// A unit variant.
    #[error("cancelled")]
    Unit,
}

pub enum After {
    Later,
}
"##;
    let got: Vec<(String, bool)> = variants(source, "Error")
        .unwrap()
        .into_iter()
        .map(|v| (v.name, v.transparent))
        .collect();
    let want: Vec<(String, bool)> = [
        ("Io", false),
        ("Spread", false),
        ("Wrapped", true),
        ("AlsoWrapped", true),
        ("Text", false),
        ("Unit", false),
    ]
    .iter()
    .map(|(n, t)| (n.to_string(), *t))
    .collect();
    assert_eq!(got, want);
    assert!(variants(source, "Missing").is_err());
    assert!(variants("pub enum Error {\n    A,\n", "Error").is_err());

    let guide =
        "# Guide\n## a::B\n### X\n```\n### InCode\n## InCode\n```\n## `c::D`\n### `Y`\n## a::B\n";
    let (s, twice) = sections(guide);
    assert_eq!(s["a::B"], ["X"]);
    assert_eq!(s["c::D"], ["Y"]);
    assert!(!s.contains_key("InCode"));
    assert_eq!(twice, ["a::B"]);
}
