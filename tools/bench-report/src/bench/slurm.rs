//! `bench/slurm.sh`: Slurm step start-up with berth's SPANK plugin, shared
//! and per-task mode against native srun.

use serde_json::Value;

use super::{Headline, Section};
use crate::fmt::{self, Table};
use crate::results::{num, text, ResultFile};

const CASES: &[&str] = &["true", "mpi", "mpi3"];

/// Renders the Slurm section.
pub fn render(f: &ResultFile) -> Result<Section, String> {
    let v = &f.json;
    let mut s = Section::default();
    let mut t = Table::new(&[
        "case",
        "srun",
        ">native ms",
        ">shared ms",
        ">per-task ms",
        ">shared / native",
        ">per-task / native",
    ]);
    for case in CASES {
        let ms = |var: &str| num(v, &format!("/summary/{case}/{var}/median_ms"));
        let ratio = |var: &str| num(v, &format!("/ratios/{case}/{var}"));
        let Some(native) = ms("native") else {
            continue;
        };
        let cell = |x: Option<f64>| x.map(fmt::sig3).unwrap_or_default();
        let r = |x: Option<f64>| x.map(|x| format!("{x:.2}")).unwrap_or_default();
        t.row(vec![
            format!("`{case}`"),
            format!("`{}`", text(v, &format!("/how/{case}")).unwrap_or("")),
            fmt::sig3(native),
            cell(ms("shared")),
            cell(ms("per-task")),
            r(ratio("shared")),
            r(ratio("per-task")),
        ]);
        if let (Some(shared), Some(rs)) = (ms("shared"), ratio("shared")) {
            s.headline.push(Headline {
                benchmark: "slurm".into(),
                figure: format!(
                    "`{}` with `--container-image`, shared mode",
                    text(v, &format!("/how/{case}")).unwrap_or(case)
                ),
                berth: format!("{} ms", fmt::sig3(shared)),
                peer: format!("{} ms native srun", fmt::sig3(native)),
                ratio: format!("{rs:.2}"),
                target: "≤ 1.5".into(),
                met: rs <= 1.5,
            });
        }
    }
    s.set("slurm.table", t.render());
    s.set("slurm.source", f.name());
    s.set("slurm.runs", format!("{}", num(v, "/runs").unwrap_or(0.0)));
    Ok(s)
}

/// Whether a JSON is slurm.sh's.
pub fn accept(v: &Value) -> bool {
    v.get("benchmark").and_then(Value::as_str) == Some("slurm-start")
}
