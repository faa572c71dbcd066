//! `bench/inject.sh`: what host-resource injection adds to a start (GPUs by
//! discovery and through CDI, an MPI-style module), per round against a
//! plain start.

use serde_json::Value;

use super::{Headline, Section};
use crate::fmt::{self, Table};
use crate::results::{num, text, ResultFile};

const VARIANTS: &[&str] = &["plain", "gpus-discovery", "gpus-cdi", "mpi-module"];

/// Renders the injection-cost section.
pub fn render(f: &ResultFile) -> Result<Section, String> {
    let v = &f.json;
    let mut s = Section::default();
    let mut t = Table::new(&["variant", "how", ">median ms (IQR)", ">more than plain, ms"]);
    for var in VARIANTS {
        let Some(sum) = v.pointer(&format!("/summary/{var}")) else {
            continue;
        };
        let delta = num(v, &format!("/deltas_ms/{var}/median"));
        t.row(vec![
            format!("`{var}`"),
            text(v, &format!("/how/{var}")).unwrap_or("").to_string(),
            match (num(sum, "/median"), num(sum, "/p25"), num(sum, "/p75")) {
                (Some(m), Some(lo), Some(hi)) => {
                    format!("{} ({}–{})", fmt::sig3(m), fmt::sig3(lo), fmt::sig3(hi))
                }
                _ => String::new(),
            },
            delta.map(|d| format!("{d:+.2}")).unwrap_or_default(),
        ]);
        if let Some(d) = delta {
            s.set(format!("inject.{var}.delta"), format!("{d:.2} ms"));
            s.headline.push(Headline {
                benchmark: "injection".into(),
                figure: format!("start cost of `{var}`"),
                berth: format!("+{d:.2} ms"),
                peer: num(v, "/summary/plain/median")
                    .map(|p| format!("{} ms plain", fmt::sig3(p)))
                    .unwrap_or_default(),
                ratio: String::new(),
                target: "< 2 ms".into(),
                met: d < 2.0,
            });
        }
    }
    s.set("inject.table", t.render());
    s.set("inject.source", f.name());
    s.set("inject.runs", format!("{}", num(v, "/runs").unwrap_or(0.0)));
    Ok(s)
}

/// Whether a JSON is inject.sh's.
pub fn accept(v: &Value) -> bool {
    v.get("benchmark").and_then(Value::as_str) == Some("inject")
}
