//! `bench/squashfs-settings.sh`: which compressor and block size berth's
//! store writes.

use serde_json::Value;

use super::Section;
use crate::fmt::{self, Table};
use crate::results::{num, text, ResultFile};

/// Renders the squashfs settings section.
pub fn render(f: &ResultFile) -> Result<Section, String> {
    let v = &f.json;
    let mut s = Section::default();
    let rows = v.get("rows").and_then(Value::as_array).ok_or("no rows")?;
    let mut t = Table::new(&[
        "compressor:level:block",
        ">pull s",
        ">image MB",
        ">first `python3 -c pass` ms",
        ">warm ms",
    ]);
    for r in rows {
        t.row(vec![
            format!("`{}`", text(r, "/setting").unwrap_or("?")),
            num(r, "/pull_s").map(fmt::sig3).unwrap_or_default(),
            num(r, "/size_mb")
                .map(|m| format!("{m:.1}"))
                .unwrap_or_default(),
            num(r, "/first_python_ms")
                .map(fmt::sig3)
                .unwrap_or_default(),
            num(r, "/warm_python_ms").map(fmt::sig3).unwrap_or_default(),
        ]);
    }
    s.set("settings.table", t.render());
    s.set("settings.source", f.name());
    s.set(
        "settings.warm_runs",
        format!("{}", num(v, "/warm_runs").unwrap_or(0.0)),
    );
    Ok(s)
}

/// Whether a JSON is squashfs-settings.sh's.
pub fn accept(v: &Value) -> bool {
    v.get("benchmark").and_then(Value::as_str) == Some("squashfs-settings")
}
