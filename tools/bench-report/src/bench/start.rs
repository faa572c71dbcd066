//! `bench/start.sh`: start latency of `true` and `python3 -c pass`, berth
//! against ch-run (directory and squashfs), crun/runc, podman and the
//! `unshare` floor.

use serde_json::Value;

use super::{Headline, Section};
use crate::fmt::{self, Table};
use crate::results::{num, text, ResultFile};
use crate::svg::{Bar, BarChart};

const CASES: &[(&str, &str)] = &[("true", "`true`"), ("python", "`python3 -c pass`")];

/// "median ms (p25–p75)" of a start summary (values in ms).
fn cell(s: &Value) -> String {
    match (num(s, "/median"), num(s, "/p25"), num(s, "/p75")) {
        (Some(m), Some(lo), Some(hi)) => {
            format!("{} ({}–{})", fmt::sig3(m), fmt::sig3(lo), fmt::sig3(hi))
        }
        (Some(m), _, _) => fmt::sig3(m),
        _ => String::new(),
    }
}

/// Renders the start section.
pub fn render(f: &ResultFile) -> Result<Section, String> {
    let v = &f.json;
    let mut s = Section::default();
    let tools: Vec<String> = v
        .get("tools")
        .and_then(Value::as_array)
        .ok_or("no tools list")?
        .iter()
        .filter_map(|t| t.as_str().map(str::to_string))
        .collect();
    let mut t = Table::new(&[
        "tool",
        "how",
        ">`true` ms (IQR)",
        ">`python3 -c pass` ms (IQR)",
    ]);
    let mut order: Vec<(f64, String)> = tools
        .iter()
        .filter_map(|tool| {
            num(v, &format!("/summary/starts/true/{tool}/median")).map(|m| (m, tool.clone()))
        })
        .collect();
    order.sort_by(|a, b| a.0.total_cmp(&b.0));
    for (_, tool) in &order {
        let how = text(v, &format!("/how/{tool}")).unwrap_or(tool);
        t.row(vec![
            format!("`{tool}`"),
            how.to_string(),
            v.pointer(&format!("/summary/starts/true/{tool}"))
                .map(cell)
                .unwrap_or_default(),
            v.pointer(&format!("/summary/starts/python/{tool}"))
                .map(cell)
                .unwrap_or_default(),
        ]);
        for (case, _) in CASES {
            if let Some(m) = num(v, &format!("/summary/starts/{case}/{tool}/median")) {
                s.set(
                    format!("start.{case}.{tool}"),
                    format!("{} ms", fmt::sig3(m)),
                );
            }
        }
    }
    s.set("start.table", t.render());
    s.set("start.source", f.name());
    s.set("start.runs", format!("{}", num(v, "/runs").unwrap_or(0.0)));

    // Ratios berth/peer, per round, median.
    let mut r = Table::new(&["berth / peer", ">`true`", ">`python3 -c pass`"]);
    for (_, tool) in order.iter().filter(|(_, t)| t != "berth") {
        let mut row = vec![format!("`{tool}`")];
        for (case, _) in CASES {
            let x = num(v, &format!("/summary/ratios/{case}/{tool}/median"));
            if let Some(x) = x {
                s.set(format!("start.ratio.{case}.{tool}"), fmt::ratio(x));
            }
            row.push(x.map(fmt::ratio).unwrap_or_default());
        }
        r.row(row);
    }
    s.set("start.ratios", r.render());

    // Unavailable peers, and why.
    let unavailable: Vec<String> = v
        .get("unavailable")
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .map(|(k, why)| format!("`{k}`: {}", why.as_str().unwrap_or("?")))
                .collect()
        })
        .unwrap_or_default();
    s.set(
        "start.unavailable",
        if unavailable.is_empty() {
            "Every peer ran.".to_string()
        } else {
            format!("Peers that could not run: {}.", unavailable.join("; "))
        },
    );

    // berth's cold start and its own phases.
    s.set(
        "start.first_ms",
        num(v, "/summary/berth_first_start/ms")
            .map(|m| format!("{} ms", fmt::sig3(m)))
            .unwrap_or_else(|| "not measured".into()),
    );
    let phases: Vec<String> = v
        .pointer("/summary/berth_phases_us/true")
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .filter_map(|(k, p)| {
                    num(p, "/median").map(|us| format!("{k} {}", fmt::sig3(us / 1000.0)))
                })
                .collect()
        })
        .unwrap_or_default();
    s.set("start.phases", format!("{} ms", phases.join(", ")));

    // Targets, as start.sh states and judges them.
    for target in v
        .pointer("/summary/targets")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let (Some(case), Some(peer), Some(limit)) = (
            text(target, "/case"),
            text(target, "/peer"),
            num(target, "/limit"),
        ) else {
            continue;
        };
        let Some(ratio) = num(target, "/per_round_median") else {
            continue;
        };
        let label = CASES
            .iter()
            .find(|(c, _)| *c == case)
            .map_or(case, |(_, l)| l);
        s.headline.push(Headline {
            benchmark: "start".into(),
            figure: format!("start of {label} vs `{peer}`"),
            berth: s
                .values
                .get(&format!("start.{case}.berth"))
                .cloned()
                .unwrap_or_default(),
            peer: s
                .values
                .get(&format!("start.{case}.{peer}"))
                .cloned()
                .unwrap_or_default(),
            ratio: fmt::ratio(ratio),
            target: format!("≤ {limit}"),
            met: ratio <= limit,
        });
    }

    for (case, label) in CASES {
        let Some(tools) = v
            .pointer(&format!("/summary/starts/{case}"))
            .and_then(Value::as_object)
        else {
            continue;
        };
        let mut bars: Vec<Bar> = tools
            .iter()
            .filter_map(|(tool, st)| {
                Some(Bar {
                    label: tool.clone(),
                    value: num(st, "/median")?,
                    range: num(st, "/p25").zip(num(st, "/p75")),
                    highlight: tool == "berth",
                })
            })
            .collect();
        bars.sort_by(|a, b| a.value.total_cmp(&b.value));
        s.charts.push((
            format!("start-{case}.svg"),
            BarChart {
                title: format!(
                    "Start latency: {} (median ms, interquartile range)",
                    label.trim_matches('`')
                ),
                unit: "ms".into(),
                log: true,
                bars,
            },
        ));
    }
    Ok(s)
}

/// Whether a JSON is start.sh's.
pub fn accept(v: &Value) -> bool {
    v.get("benchmark").and_then(Value::as_str) == Some("start-latency")
}
