//! `bench/ranks.sh`: N starts of one image at once on a node, berth (warm
//! and cold keeper) against ch-run on squashfs and on a directory.

use serde_json::Value;

use super::{Headline, Section};
use crate::fmt::{self, Table};
use crate::results::{num, text, ResultFile};
use crate::svg::{Bar, BarChart};

const TOOLS: &[&str] = &["berth-warm", "berth-cold", "ch-run-sqfs", "ch-run-dir"];

/// Renders the many-ranks section.
pub fn render(f: &ResultFile) -> Result<Section, String> {
    let v = &f.json;
    let mut s = Section::default();
    let summary = v
        .get("summary")
        .and_then(Value::as_array)
        .ok_or("no summary")?;
    for (case, label) in [("true", "`true`"), ("python", "`python3 -c pass`")] {
        let mut t = Table::new(&[
            ">ranks",
            ">berth warm",
            ">berth cold",
            ">ch-run squashfs",
            ">ch-run dir",
            ">warm/squashfs",
            ">warm/dir",
        ]);
        let mut bars = Vec::new();
        let mut last: Option<&Value> = None;
        for e in summary.iter().filter(|e| text(e, "/case") == Some(case)) {
            let ranks = num(e, "/ranks").unwrap_or(0.0);
            let mut row = vec![format!("{ranks}")];
            for tool in TOOLS {
                let m = num(e, &format!("/tools/{tool}/median"));
                row.push(m.map(|ms| fmt::duration(ms / 1e3)).unwrap_or_default());
                if let Some(ms) = m {
                    bars.push(Bar {
                        label: format!("{ranks} ranks: {tool}"),
                        value: ms,
                        range: None,
                        highlight: tool.starts_with("berth"),
                    });
                }
            }
            for peer in ["ch-run-sqfs", "ch-run-dir"] {
                row.push(
                    num(e, &format!("/ratios/berth-warm~1{peer}/median"))
                        .map(fmt::ratio)
                        .unwrap_or_default(),
                );
            }
            t.row(row);
            last = Some(e);
        }
        s.set(format!("ranks.{case}.table"), t.render());
        if let Some(e) = last {
            let ranks = num(e, "/ranks").unwrap_or(0.0);
            for peer in ["ch-run-sqfs", "ch-run-dir"] {
                let r = num(e, &format!("/ratios/berth-warm~1{peer}/median"));
                s.set(
                    format!("ranks.{case}.{peer}.ratio"),
                    r.map(fmt::ratio).unwrap_or_else(|| "n/a".into()),
                );
            }
            if let (Some(b), Some(p), Some(r)) = (
                num(e, "/tools/berth-warm/median"),
                num(e, "/tools/ch-run-sqfs/median"),
                num(e, "/ratios/berth-warm~1ch-run-sqfs/median"),
            ) {
                s.headline.push(Headline {
                    benchmark: "ranks".into(),
                    figure: format!("{ranks} starts of {label} at once vs ch-run squashfs"),
                    berth: fmt::duration(b / 1e3),
                    peer: fmt::duration(p / 1e3),
                    ratio: fmt::ratio(r),
                    target: "< 1 (faster)".into(),
                    met: r < 1.0,
                });
            }
        }
        s.charts.push((
            format!("ranks-{case}.svg"),
            BarChart {
                title: format!(
                    "{} ranks at once: time until the last ends (ms)",
                    label.trim_matches('`')
                ),
                unit: "ms".into(),
                log: true,
                bars,
            },
        ));
    }
    let warm = num(v, "/keeper_checks/warm_bursts").unwrap_or(0.0);
    let changed = num(v, "/keeper_checks/warm_bursts_keeper_changed_during").unwrap_or(0.0)
        + num(v, "/keeper_checks/warm_bursts_keeper_restarted_before").unwrap_or(0.0);
    let cold = num(v, "/keeper_checks/cold_bursts").unwrap_or(0.0);
    let cold_bad = num(v, "/keeper_checks/cold_bursts_without_keeper_after").unwrap_or(0.0);
    s.set(
        "ranks.keeper",
        format!(
            "{} of {warm} warm bursts kept one keeper throughout; {} of {cold} cold bursts left exactly one keeper for the image",
            warm - changed,
            cold - cold_bad
        ),
    );
    s.set("ranks.source", f.name());
    s.set("ranks.reps", format!("{}", num(v, "/reps").unwrap_or(0.0)));
    Ok(s)
}

/// Whether a JSON is ranks.sh's.
pub fn accept(v: &Value) -> bool {
    v.get("benchmark").and_then(Value::as_str) == Some("ranks")
}
