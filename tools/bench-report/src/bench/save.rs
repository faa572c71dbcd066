//! `bench/save.sh`: `berth run --save` against `podman commit` and
//! mksquashfs of the container's unpacked tree.

use serde_json::Value;

use super::{Headline, Section};
use crate::fmt::{self, Table};
use crate::results::{num, ResultFile};

const TOOLS: &[&str] = &["berth", "podman", "mksquashfs"];

/// Renders the save section.
pub fn render(f: &ResultFile) -> Result<Section, String> {
    let v = &f.json;
    let mut s = Section::default();
    let mut t = Table::new(&["tool", ">save ms", ">output MB", ">berth / tool"]);
    let get = |tool: &str, key: &str| num(v, &format!("/summary/{tool}/{key}"));
    for tool in TOOLS {
        let (Some(ms), Some(bytes)) = (get(tool, "median_ms"), get(tool, "median_bytes")) else {
            continue;
        };
        let ratio = num(v, &format!("/ratios/{tool}"))
            .map(|x| format!("{x:.2}"))
            .unwrap_or_default();
        t.row(vec![
            format!("`{tool}`"),
            fmt::sig3(ms),
            fmt::sig3(bytes / 1e6),
            ratio,
        ]);
    }
    if let (Some(b), Some(m), Some(r)) = (
        get("berth", "median_ms"),
        get("mksquashfs", "median_ms"),
        num(v, "/ratios/mksquashfs"),
    ) {
        s.headline.push(Headline {
            benchmark: "save".into(),
            figure: "`berth run --save`, Debian + one package".into(),
            berth: format!("{} ms", fmt::sig3(b)),
            peer: format!("{} ms mksquashfs of the tree", fmt::sig3(m)),
            ratio: format!("{r:.2}"),
            target: "≤ 0.5".into(),
            met: r <= 0.5,
        });
    }
    s.set("save.table", t.render());
    s.set("save.source", f.name());
    s.set("save.runs", format!("{}", num(v, "/runs").unwrap_or(0.0)));
    let mb = |p: &str| num(v, p).map(|x| fmt::sig3(x / 1e6)).unwrap_or_default();
    s.set("save.package_mb", mb("/how/package_bytes"));
    s.set("save.tree_mb", mb("/how/tree_bytes"));
    Ok(s)
}

/// Whether a JSON is save.sh's.
pub fn accept(v: &Value) -> bool {
    v.get("benchmark").and_then(Value::as_str) == Some("save")
}
