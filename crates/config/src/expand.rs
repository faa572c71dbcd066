//! `$VAR` and `${VAR}` in the path settings of berth.toml
//! (`store = "/scratch/${USER}/berth"`): expanded from the environment of
//! the command that reads the file; `$$` is a `$`. A variable that is not
//! set is an error naming it, never an empty string or a directory named
//! `$USER`.

/// Expands `text`; `get` reads a variable. The error names the variable
/// that is not set, or the malformed `${`.
pub fn expand(text: &str, get: &dyn Fn(&str) -> Option<String>) -> Result<String, String> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        let (name, used) = if let Some(inner) = after.strip_prefix('{') {
            let end = inner
                .find('}')
                .ok_or_else(|| format!("{text:?}: `${{` without its `}}`"))?;
            (&inner[..end], end + 2)
        } else if let Some(more) = after.strip_prefix('$') {
            out.push('$');
            rest = more;
            continue;
        } else {
            let end = after
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(after.len());
            (&after[..end], end)
        };
        if !is_name(name) {
            return Err(format!(
                "{text:?}: `$` must start a variable ($NAME or ${{NAME}}); write $$ for a `$`"
            ));
        }
        let value = get(name)
            .ok_or_else(|| format!("{text:?} uses ${name}, which is not set in the environment"))?;
        out.push_str(&value);
        rest = &after[used..];
    }
    out.push_str(rest);
    Ok(out)
}

/// Whether `name` is a shell variable's name (a letter or `_`, then
/// letters, digits and `_`).
pub fn is_name(name: &str) -> bool {
    name.chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Expands every string in a TOML value (tables and arrays included).
pub fn expand_value(
    value: &mut toml::Value,
    get: &dyn Fn(&str) -> Option<String>,
) -> Result<(), String> {
    match value {
        toml::Value::String(s) => *s = expand(s, get)?,
        toml::Value::Array(items) => {
            for v in items {
                expand_value(v, get)?;
            }
        }
        toml::Value::Table(t) => {
            for (_, v) in t.iter_mut() {
                expand_value(v, get)?;
            }
        }
        _ => {}
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(k: &str) -> Option<String> {
        match k {
            "USER" => Some("alice".into()),
            "SCRATCH" => Some("/lustre/scratch".into()),
            _ => None,
        }
    }

    #[test]
    fn variables_braced_or_not() {
        assert_eq!(
            expand("/scratch/$USER/berth", &env).unwrap(),
            "/scratch/alice/berth"
        );
        assert_eq!(
            expand("${SCRATCH}/${USER}_x", &env).unwrap(),
            "/lustre/scratch/alice_x"
        );
        assert_eq!(expand("/a/$$USER", &env).unwrap(), "/a/$USER");
        assert_eq!(expand("/plain", &env).unwrap(), "/plain");
    }

    #[test]
    fn unset_and_malformed_are_errors() {
        assert!(expand("/s/$NOPE/x", &env)
            .unwrap_err()
            .contains("$NOPE, which is not set"));
        assert!(expand("/s/${USER", &env)
            .unwrap_err()
            .contains("without its"));
        assert!(expand("/s/$/x", &env).unwrap_err().contains("write $$"));
        assert!(expand("/s/${1A}", &env).is_err());
    }

    #[test]
    fn path_settings_expand_variables_and_unset_ones_are_errors() {
        let env = |k: &str| match k {
            "USER" => Some("alice".to_string()),
            "SCRATCH" => Some("/lustre/scratch".to_string()),
            _ => None,
        };
        let f = crate::ConfigFile::parse_with(
            "store = \"/scratch/$USER/berth\"\nshared_stores = [\"${SCRATCH}/site\"]\n[runtime]\nbinds = [\"$SCRATCH/$USER:/work\"]\n[host]\nmodules_dir = \"${SCRATCH}/modules\"\n[modules.m]\nenv = [\"KEEP=$HOME\"]\n",
            std::path::Path::new("/etc/berth/berth.toml"),
            &env,
        )
        .unwrap();
        assert_eq!(
            f.store,
            Some(std::path::PathBuf::from("/scratch/alice/berth"))
        );
        assert_eq!(
            f.shared_stores,
            vec![std::path::PathBuf::from("/lustre/scratch/site")]
        );
        assert_eq!(f.runtime.unwrap().binds, ["/lustre/scratch/alice:/work"]);
        assert_eq!(
            f.host.get("modules_dir").and_then(|v| v.as_str()),
            Some("/lustre/scratch/modules")
        );
        // Modules are left as written (their values may be the container's).
        assert!(format!("{:?}", f.modules).contains("KEEP=$HOME"));
        let err = crate::ConfigFile::parse_with(
            "store = \"/scratch/$NOPE/berth\"\n",
            std::path::Path::new("/etc/berth/berth.toml"),
            &env,
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("/etc/berth/berth.toml")
                && err.contains("`store`")
                && err.contains("$NOPE, which is not set"),
            "{err}"
        );
    }
}
