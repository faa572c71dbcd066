//! `bench/build.sh`: `berth build` against `podman build` (and `ch-image
//! build` where installed), cold (`--no-cache`) and cached; `berth-seccomp`
//! is berth's build under root emulation.

use serde_json::Value;

use super::{Headline, Section};
use crate::fmt::{self, Table};
use crate::results::{num, ResultFile};

const TOOLS: &[&str] = &["berth", "berth-seccomp", "podman", "ch-image"];

/// Renders the build section.
pub fn render(f: &ResultFile) -> Result<Section, String> {
    let v = &f.json;
    let mut s = Section::default();
    let mut t = Table::new(&[
        "tool",
        ">cold ms",
        ">cached ms",
        ">berth / tool, cold",
        ">berth / tool, cached",
    ]);
    let ms = |tool: &str, kind: &str| num(v, &format!("/summary/{tool}/{kind}/median_ms"));
    let ratio = |tool: &str, kind: &str| num(v, &format!("/ratios/{tool}/{kind}"));
    for tool in TOOLS {
        let (Some(cold), Some(cached)) = (ms(tool, "cold"), ms(tool, "cached")) else {
            continue;
        };
        let r = |k: &str| {
            ratio(tool, k)
                .map(|x| format!("{x:.2}"))
                .unwrap_or_default()
        };
        t.row(vec![
            format!("`{tool}`"),
            fmt::sig3(cold),
            fmt::sig3(cached),
            r("cold"),
            r("cached"),
        ]);
    }
    for (kind, target) in [("cold", 1.2), ("cached", 0.5)] {
        if let (Some(b), Some(p), Some(r)) =
            (ms("berth", kind), ms("podman", kind), ratio("podman", kind))
        {
            s.headline.push(Headline {
                benchmark: "build".into(),
                figure: format!("`berth build`, {kind} (the same Dockerfile)"),
                berth: format!("{} ms", fmt::sig3(b)),
                peer: format!("{} ms podman build", fmt::sig3(p)),
                ratio: format!("{r:.2}"),
                target: format!("≤ {target}"),
                met: r <= target,
            });
        }
    }
    let emulation: Vec<String> = ["berth", "ch-image"]
        .iter()
        .filter_map(|other| {
            let r = |k: &str| num(v, &format!("/emulation/{other}/{k}"));
            let (cold, cached) = (r("cold")?, r("cached")?);
            let name = match *other {
                "berth" => "the subuid build",
                _ => "ch-image",
            };
            Some(format!("{cold:.2} × {name} cold, {cached:.2} cached"))
        })
        .collect();
    s.set(
        "build.emulation",
        if emulation.is_empty() {
            "not measured in this run".to_string()
        } else {
            emulation.join("; ")
        },
    );
    s.set("build.table", t.render());
    s.set("build.source", f.name());
    s.set("build.runs", format!("{}", num(v, "/runs").unwrap_or(0.0)));
    Ok(s)
}

/// Whether a JSON is build.sh's.
pub fn accept(v: &Value) -> bool {
    v.get("benchmark").and_then(Value::as_str) == Some("build")
}
