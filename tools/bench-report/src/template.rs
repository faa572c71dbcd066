//! The page's template: prose with `{{name}}` placeholders that the
//! benchmark sections fill in (tables, figures, verdicts).

use std::collections::BTreeMap;

/// Named values for the template.
pub type Values = BTreeMap<String, String>;

/// Replaces every `{{name}}` in `template` with its value; an unknown name
/// is an error (a figure the results do not have must not be printed as
/// text that looks like one).
pub fn fill(template: &str, values: &Values) -> Result<String, Vec<String>> {
    let mut out = String::with_capacity(template.len() * 2);
    let mut missing = Vec::new();
    let mut rest = template;
    while let Some(start) = rest.find("{{") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let Some(end) = after.find("}}") else {
            out.push_str(&rest[start..]);
            rest = "";
            break;
        };
        let name = after[..end].trim();
        match values.get(name) {
            Some(v) => out.push_str(v),
            None => missing.push(name.to_string()),
        }
        rest = &after[end + 2..];
    }
    out.push_str(rest);
    if missing.is_empty() {
        Ok(out)
    } else {
        missing.dedup();
        Err(missing)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fills_and_reports_unknown_names() {
        let mut v = Values::new();
        v.insert("a.b".into(), "1.18".into());
        assert_eq!(fill("x {{a.b}} y {{ a.b }}", &v).unwrap(), "x 1.18 y 1.18");
        assert_eq!(fill("{{nope}} {{a.b}}", &v).unwrap_err(), vec!["nope"]);
        assert_eq!(fill("no close {{a.b", &v).unwrap(), "no close {{a.b");
    }
}
