//! One environment definition file: its TOML fields, every string's
//! `${VAR}` expanded from the caller's environment (`${VAR:-WORD}` gives
//! WORD where VAR is unset, `$$` is a `$`), errors naming the file and
//! the line.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;
use toml::Spanned;

use super::Environment;
use crate::error::{Error, Result};

/// A file: its bases (as written, expanded) and its fields.
#[derive(Debug, Default)]
pub(super) struct File {
    pub bases: Vec<String>,
    /// Its own fields (no `files`).
    pub fields: Environment,
}

/// The file as TOML gives it.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Raw {
    base_environment: Option<Spanned<OneOrMany>>,
    image: Option<Spanned<String>>,
    mounts: Option<Vec<Spanned<String>>>,
    workdir: Option<Spanned<String>>,
    writable: Option<bool>,
    entrypoint: Option<bool>,
    env: Option<BTreeMap<String, Spanned<String>>>,
    annotations: Option<toml::Table>,
    devices: Option<Vec<Spanned<String>>>,
}

/// `base_environment`: a string or a list of them.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum OneOrMany {
    One(String),
    Many(Vec<String>),
}

/// Reads and expands the file at `path`.
pub(super) fn read(path: &Path, var: &dyn Fn(&str) -> Option<String>) -> Result<File> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| Error::Environment(format!("{}: cannot read it: {e}", path.display())))?;
    parse(&text, path, var)
}

/// Parses `text`, the file at `path`.
pub(super) fn parse(text: &str, path: &Path, var: &dyn Fn(&str) -> Option<String>) -> Result<File> {
    let raw: Raw = toml::from_str(text).map_err(|e| {
        let line = e
            .span()
            .map(|s| format!(", line {}", line_of(text, s.start)))
            .unwrap_or_default();
        Error::Environment(format!(
            "{}{line}: {}",
            path.display(),
            e.message().trim_end()
        ))
    })?;
    let at = |s: &Spanned<String>| -> Result<String> {
        expand(s.get_ref(), var).map_err(|why| {
            Error::Environment(format!(
                "{}, line {}: {why}",
                path.display(),
                line_of(text, s.span().start)
            ))
        })
    };
    let all = |v: &Option<Vec<Spanned<String>>>| -> Result<Vec<String>> {
        v.iter().flatten().map(&at).collect()
    };
    let bases = match &raw.base_environment {
        None => Vec::new(),
        Some(b) => {
            let names = match b.get_ref() {
                OneOrMany::One(s) if s.is_empty() => Vec::new(),
                OneOrMany::One(s) => vec![s.clone()],
                OneOrMany::Many(v) => v.clone(),
            };
            names
                .into_iter()
                .map(|n| at(&Spanned::new(b.span(), n)))
                .collect::<Result<_>>()?
        }
    };
    let mut env = Vec::new();
    for (k, v) in raw.env.iter().flatten() {
        let value = at(v)?;
        env.push((k.clone(), (!value.is_empty()).then_some(value)));
    }
    let mut annotations = Vec::new();
    if let Some(table) = &raw.annotations {
        flatten("", table, &mut annotations);
    }
    for (k, v) in &mut annotations {
        *v = expand(v, var).map_err(|why| {
            Error::Environment(format!("{}: annotation {k}: {why}", path.display()))
        })?;
    }
    Ok(File {
        bases,
        fields: Environment {
            files: Vec::new(),
            image: raw
                .image
                .as_ref()
                .map(&at)
                .transpose()?
                .filter(|s| !s.is_empty()),
            mounts: all(&raw.mounts)?,
            workdir: raw
                .workdir
                .as_ref()
                .map(&at)
                .transpose()?
                .filter(|s| !s.is_empty()),
            writable: raw.writable,
            entrypoint: raw.entrypoint,
            env,
            annotations,
            devices: all(&raw.devices)?,
        },
    })
}

/// `[annotations]` with dotted keys (`com.hooks.cxi.enabled = "true"` is a
/// table of tables in TOML) as `KEY=VALUE` pairs; values other than
/// strings as TOML writes them.
fn flatten(prefix: &str, table: &toml::Table, out: &mut Vec<(String, String)>) {
    for (k, v) in table {
        let key = if prefix.is_empty() {
            k.clone()
        } else {
            format!("{prefix}.{k}")
        };
        match v {
            toml::Value::Table(t) => flatten(&key, t, out),
            toml::Value::String(s) => out.push((key, s.clone())),
            toml::Value::Boolean(b) => out.push((key, b.to_string())),
            toml::Value::Integer(i) => out.push((key, i.to_string())),
            toml::Value::Float(f) => out.push((key, f.to_string())),
            toml::Value::Datetime(d) => out.push((key, d.to_string())),
            // An array has no single value: its items joined by commas.
            toml::Value::Array(items) => {
                let mut inner = Vec::new();
                for (i, item) in items.iter().enumerate() {
                    let mut t = toml::Table::new();
                    t.insert(i.to_string(), item.clone());
                    flatten("", &t, &mut inner);
                }
                let joined: Vec<String> = inner.into_iter().map(|(_, v)| v).collect();
                out.push((key, joined.join(",")));
            }
        }
    }
}

/// The 1-based line of byte `offset` in `text`.
fn line_of(text: &str, offset: usize) -> usize {
    text.as_bytes()[..offset.min(text.len())]
        .iter()
        .filter(|&&b| b == b'\n')
        .count()
        + 1
}

/// Expands `${VAR}` and `${VAR:-WORD}`; `$$` is a `$`, and any other `$`
/// stays as written. An unset variable without a default is an error
/// naming it.
pub(super) fn expand(
    text: &str,
    var: &dyn Fn(&str) -> Option<String>,
) -> std::result::Result<String, String> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        if let Some(more) = after.strip_prefix('$') {
            out.push('$');
            rest = more;
        } else if let Some(inner) = after.strip_prefix('{') {
            let end = inner
                .find('}')
                .ok_or_else(|| format!("{text:?}: `${{` without its `}}`"))?;
            let body = &inner[..end];
            let (name, default) = match body.split_once(":-") {
                Some((n, d)) => (n, Some(d)),
                None => (body, None),
            };
            if !berth_config::expand::is_name(name) {
                return Err(format!(
                    "{text:?}: ${{{body}}} is not a variable (${{NAME}} or ${{NAME:-DEFAULT}}; $$ for a `$`)"
                ));
            }
            match (var(name), default) {
                (Some(v), _) => out.push_str(&v),
                (None, Some(d)) => out.push_str(d),
                (None, None) => {
                    return Err(format!(
                        "{text:?} uses ${{{name}}}, which is not set (set it, or write ${{{name}:-}} for an empty default)"
                    ))
                }
            }
            rest = &inner[end + 1..];
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    Ok(out)
}
