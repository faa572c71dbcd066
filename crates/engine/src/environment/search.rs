//! Where environment definition files are found: a name with a `/` or
//! ending in `.toml` is a path (relative to the current directory);
//! another name is `NAME.toml` in the first directory of the search path
//! that has it: `EDF_PATH` (colon-separated absolute directories) or,
//! where that is unset, `~/.edf`; then the site's directory.

use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// The directories names are looked up in, in order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SearchPath {
    /// The directories.
    pub dirs: Vec<PathBuf>,
}

impl SearchPath {
    /// `EDF_PATH` or `~/.edf` (from `var`, the caller's environment), then
    /// `site` (the site's directory, when there is one).
    pub fn new(var: &dyn Fn(&str) -> Option<String>, site: Option<&Path>) -> Self {
        let mut dirs: Vec<PathBuf> = match var("EDF_PATH").filter(|p| !p.is_empty()) {
            Some(p) => p
                .split(':')
                .filter(|d| d.starts_with('/'))
                .map(PathBuf::from)
                .collect(),
            None => var("HOME")
                .map(|h| vec![Path::new(&h).join(".edf")])
                .unwrap_or_default(),
        };
        dirs.extend(site.map(Path::to_path_buf));
        SearchPath { dirs }
    }

    /// The file `name` names.
    pub fn find(&self, name: &str) -> Result<PathBuf> {
        if name.is_empty() {
            return Err(Error::Environment(
                "--environment needs a name or a path".into(),
            ));
        }
        if is_path(name) {
            let p = PathBuf::from(name);
            return if p.is_file() {
                Ok(std::path::absolute(&p).unwrap_or(p))
            } else {
                Err(Error::Environment(format!(
                    "environment file {name} does not exist (or is not a file)"
                )))
            };
        }
        for d in &self.dirs {
            let p = d.join(format!("{name}.toml"));
            if p.is_file() {
                return Ok(p);
            }
        }
        Err(Error::Environment(format!(
            "no environment named {name:?}: no {name}.toml in {}; give a path (./{name}.toml), or put the file there (EDF_PATH sets the directories; berth environments lists what is found)",
            if self.dirs.is_empty() {
                "any directory (neither EDF_PATH nor HOME is set)".to_string()
            } else {
                self.dirs
                    .iter()
                    .map(|d| d.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            }
        )))
    }

    /// Every `NAME.toml` of the search path, in order; a name an earlier
    /// directory has is marked shadowed.
    pub fn list(&self) -> Vec<Listed> {
        let mut out: Vec<Listed> = Vec::new();
        for d in &self.dirs {
            let Ok(entries) = std::fs::read_dir(d) else {
                continue;
            };
            let mut here: Vec<Listed> = entries
                .flatten()
                .filter_map(|e| {
                    let path = e.path();
                    let name = path
                        .file_name()?
                        .to_str()?
                        .strip_suffix(".toml")?
                        .to_string();
                    path.is_file().then_some(Listed {
                        name,
                        path,
                        shadowed: false,
                    })
                })
                .collect();
            here.sort_by(|a, b| a.name.cmp(&b.name));
            for mut l in here {
                l.shadowed = out.iter().any(|o| o.name == l.name);
                out.push(l);
            }
        }
        out
    }
}

/// A file found on the search path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listed {
    /// Its name (the file name without `.toml`).
    pub name: String,
    /// The file.
    pub path: PathBuf,
    /// An earlier directory has a file of this name.
    pub shadowed: bool,
}

/// Whether `name` is written as a path.
fn is_path(name: &str) -> bool {
    name.contains('/') || name.ends_with(".toml")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_looked_up_in_order_and_paths_taken_as_they_are() {
        let tmp = tempfile::tempdir().unwrap();
        let (a, b, site) = (
            tmp.path().join("a"),
            tmp.path().join("b"),
            tmp.path().join("site"),
        );
        for d in [&a, &b, &site] {
            std::fs::create_dir_all(d).unwrap();
        }
        std::fs::write(b.join("pt.toml"), "").unwrap();
        std::fs::write(site.join("pt.toml"), "").unwrap();
        std::fs::write(site.join("base.toml"), "").unwrap();
        let path = format!("{}:relative:{}", a.display(), b.display());
        let var = |k: &str| (k == "EDF_PATH").then(|| path.clone());
        let s = SearchPath::new(&var, Some(&site));
        assert_eq!(s.dirs, vec![a.clone(), b.clone(), site.clone()]);
        assert_eq!(s.find("pt").unwrap(), b.join("pt.toml"));
        assert_eq!(s.find("base").unwrap(), site.join("base.toml"));
        let e = s.find("none").unwrap_err().to_string();
        assert!(
            e.contains("no environment named \"none\"") && e.contains(&a.display().to_string()),
            "{e}"
        );
        let p = site.join("pt.toml");
        assert_eq!(s.find(p.to_str().unwrap()).unwrap(), p);
        assert!(s.find("./missing.toml").is_err());
        let listed = s.list();
        let names: Vec<(&str, bool)> = listed
            .iter()
            .map(|l| (l.name.as_str(), l.shadowed))
            .collect();
        assert_eq!(names, vec![("pt", false), ("base", false), ("pt", true)]);
    }

    #[test]
    fn without_edf_path_the_home_directory_is_searched() {
        let var = |k: &str| (k == "HOME").then(|| "/home/u".to_string());
        assert_eq!(
            SearchPath::new(&var, None).dirs,
            vec![PathBuf::from("/home/u/.edf")]
        );
    }
}
