//! config.md: every key of berth.toml and of a site module, with its type,
//! default and meaning, from the JSON schemas schemars derives from the
//! configuration types (their doc comments and serde defaults).

use std::fmt::Write as _;

use schemars::{schema_for, Schema};
use serde_json::{Map, Value};

use super::{generated_from, one_paragraph};

/// The page.
pub fn page() -> String {
    let mut out = String::from("# Configuration keys\n\n");
    out += &generated_from(
        "the configuration types (`crates/config/src/`, `crates/inject/src/host.rs`, \
         `crates/inject/src/module.rs`, `crates/inject/src/mpi/`)",
    );
    out += "\nWhere the files are, how they combine and how `$VAR` expands: \
            [Configuration files](../admin/config.md). Every key is optional unless \
            marked required; an unknown key is an error that names the file and the key.\n";
    let top = schema_for!(berth_config::ConfigFile);
    table(&top, None, "berth.toml", &mut out);
    let host = schema_for!(berth_inject::HostPaths);
    table(&host, None, "[host]", &mut out);
    out += "\nSite modules: one file `NAME.toml` in `[host] modules_dir` per module, \
            or an inline `[modules.NAME]` table of berth.toml, with these keys \
            ([Site modules, CDI and GPUs](../admin/modules.md)).\n";
    let module = schema_for!(berth_inject::module::ModuleDef);
    table(&module, None, "[modules.NAME]", &mut out);
    out
}

/// Writes the section `title` for the object `schema` (a definition of
/// `root`, or `root` itself), then a section for each of its keys that is
/// a table of its own.
fn table(root: &Schema, schema: Option<&Value>, title: &str, out: &mut String) {
    let schema = schema.unwrap_or_else(|| root.as_value());
    let Some(props) = schema.get("properties").and_then(Value::as_object) else {
        return;
    };
    let _ = write!(out, "\n## `{title}`\n\n");
    // A type's own schema is titled with its Rust name: its doc comment
    // is the description (the whole file's is the page's introduction).
    let about = schema.get("description").and_then(Value::as_str);
    if let Some(about) = about.filter(|_| title != "berth.toml") {
        let _ = writeln!(out, "{}\n", one_paragraph(about));
    }
    out.push_str("| key | type | default | meaning |\n|---|---|---|---|\n");
    let mut subtables = Vec::new();
    for (key, prop) in props {
        let resolved = resolve(root, prop);
        if resolved.get("properties").is_some() {
            subtables.push((key, resolved));
            continue;
        }
        let required = schema
            .get("required")
            .and_then(Value::as_array)
            .is_some_and(|r| r.iter().any(|k| k == key));
        let default = match required {
            true => "required".to_string(),
            false => prop
                .get("default")
                .or_else(|| schema.get("default").and_then(|d| d.get(key)))
                .map(literal)
                .unwrap_or_default(),
        };
        let mut meaning = describe(prop).unwrap_or_default();
        if let Some(values) = variants(root, prop) {
            meaning.push_str(&values);
        }
        let _ = writeln!(
            out,
            "| `{key}` | {} | {} | {} |",
            type_name(root, prop),
            cell(&default),
            cell(&meaning)
        );
    }
    for (key, sub) in subtables {
        let name = match title {
            "berth.toml" => format!("[{key}]"),
            _ => format!("{}.{key}]", title.trim_end_matches(']')),
        };
        table(root, Some(sub), &name, out);
    }
}

/// A property with `$ref`s (also inside an `anyOf` with null, an
/// `Option`) replaced by their definition.
fn resolve<'a>(root: &'a Schema, prop: &'a Value) -> &'a Value {
    if let Some(r) = prop.get("$ref").and_then(Value::as_str) {
        let name = r.rsplit('/').next().unwrap_or(r);
        return root
            .get("$defs")
            .and_then(|d| d.get(name))
            .map(|d| resolve(root, d))
            .unwrap_or(prop);
    }
    if let Some(any) = prop.get("anyOf").and_then(Value::as_array) {
        let some: Vec<&Value> = any.iter().filter(|v| !is_null(v)).collect();
        if let [one] = some[..] {
            return resolve(root, one);
        }
    }
    prop
}

fn is_null(v: &Value) -> bool {
    v.get("type").and_then(Value::as_str) == Some("null")
}

/// The schema's title and description as one paragraph.
fn describe(v: &Value) -> Option<String> {
    let parts: Vec<&str> = ["title", "description"]
        .iter()
        .filter_map(|k| v.get(*k).and_then(Value::as_str))
        .collect();
    (!parts.is_empty()).then(|| one_paragraph(&parts.join("\n\n")))
}

/// `string`, `integer`, `array of string`, `table of array of string`,
/// `boolean`, or the enum's name for a choice.
fn type_name(root: &Schema, prop: &Value) -> String {
    let v = resolve(root, prop);
    if v.get("oneOf").is_some() || v.get("enum").is_some() {
        return "string".to_string();
    }
    let base = match v.get("type") {
        Some(Value::String(t)) => t.clone(),
        Some(Value::Array(ts)) => ts
            .iter()
            .filter_map(Value::as_str)
            .filter(|t| *t != "null")
            .collect::<Vec<_>>()
            .join(" or "),
        _ => String::from("any"),
    };
    match base.as_str() {
        "array" => match v.get("items") {
            Some(items) => format!("array of {}", type_name(root, items)),
            None => base,
        },
        "object" => match v.get("additionalProperties") {
            Some(values @ Value::Object(_)) => format!("table of {}", type_name(root, values)),
            _ => "table".to_string(),
        },
        _ => base,
    }
}

/// For a choice between strings: ` One of:` and each value with its
/// meaning.
fn variants(root: &Schema, prop: &Value) -> Option<String> {
    let v = resolve(root, prop);
    if let Some(one_of) = v.get("oneOf").and_then(Value::as_array) {
        let items: Vec<String> = one_of
            .iter()
            .filter_map(|c| {
                let name = c
                    .get("const")
                    .or_else(|| c.get("enum").and_then(|e| e.get(0)))?;
                let what = describe(c)
                    .map(|d| format!(": {}", d.trim_end_matches('.')))
                    .unwrap_or_default();
                Some(format!("{}{what}", literal(name)))
            })
            .collect();
        return Some(format!(" Values: {}.", items.join("; ")));
    }
    let values = v.get("enum").and_then(Value::as_array)?;
    let names: Vec<String> = values.iter().map(literal).collect();
    Some(format!(" Values: {}.", names.join(", ")))
}

/// A default as TOML writes it, in a code span; none for null.
fn literal(v: &Value) -> String {
    fn toml(v: &Value) -> String {
        match v {
            Value::Null => String::new(),
            Value::Array(items) => {
                format!(
                    "[{}]",
                    items.iter().map(toml).collect::<Vec<_>>().join(", ")
                )
            }
            Value::Object(map) if map.is_empty() => "{}".to_string(),
            Value::Object(map) => inline_table(map),
            other => other.to_string(),
        }
    }
    fn inline_table(map: &Map<String, Value>) -> String {
        let items: Vec<String> = map
            .iter()
            .map(|(k, v)| format!("{k} = {}", toml(v)))
            .collect();
        format!("{{ {} }}", items.join(", "))
    }
    match toml(v) {
        t if t.is_empty() => String::new(),
        t => format!("`{t}`"),
    }
}

/// Text made safe for a table cell.
fn cell(text: &str) -> String {
    text.replace('|', "\\|")
}
