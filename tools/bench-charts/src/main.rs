//! `bench-charts [--results DIR] [--out DIR] [--start FILE] [--pynamic FILE]`
//!
//! Draws the charts of docs/benchmarks.md from the JSON that `bench/start.sh`
//! and `bench/pynamic.sh` write: start latency per tool (median and
//! interquartile range, log scale) and the Pynamic study (native against
//! berth per latency, metadata server and rank count). By default it takes
//! the newest full (non-smoke) result of each in `bench/results`.

mod svg;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use serde_json::Value;
use svg::{Bar, BarChart};

fn newest(dir: &Path, prefix: &str, accept: impl Fn(&Value) -> bool) -> Option<PathBuf> {
    let mut files: Vec<PathBuf> = fs::read_dir(dir)
        .ok()?
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            let name = p.file_name().and_then(|n| n.to_str()).unwrap_or_default();
            name.starts_with(prefix) && name.ends_with(".json")
        })
        .collect();
    files.sort();
    files
        .into_iter()
        .rev()
        .find(|p| load(p).is_some_and(|v| accept(&v)))
}

fn load(path: &Path) -> Option<Value> {
    serde_json::from_slice(&fs::read(path).ok()?).ok()
}

/// Start latency charts, one per case.
fn start_charts(v: &Value) -> Vec<(String, BarChart)> {
    let mut out = Vec::new();
    let Some(starts) = v.pointer("/summary/starts").and_then(Value::as_object) else {
        return out;
    };
    for (case, title) in [
        ("true", "Start latency: true"),
        ("python", "Start latency: python3 -c pass"),
    ] {
        let Some(tools) = starts.get(case).and_then(Value::as_object) else {
            continue;
        };
        let mut bars: Vec<Bar> = tools
            .iter()
            .filter_map(|(tool, s)| {
                Some(Bar {
                    label: tool.clone(),
                    value: s.get("median")?.as_f64()?,
                    range: Some((s.get("p25")?.as_f64()?, s.get("p75")?.as_f64()?)),
                    highlight: tool == "berth",
                })
            })
            .collect();
        bars.sort_by(|a, b| a.value.total_cmp(&b.value));
        out.push((
            format!("start-{case}.svg"),
            BarChart {
                title: format!("{title} (median ms, interquartile range)"),
                unit: "ms".to_string(),
                log: true,
                bars,
            },
        ));
    }
    out
}

/// The Pynamic study: native and berth side by side for every configuration.
fn pynamic_chart(v: &Value) -> Option<BarChart> {
    let rows = v.as_array()?;
    let mut bars = Vec::new();
    for r in rows {
        let delay = r.get("delay_us")?.as_u64()?;
        let mode = r.get("metadata_server")?.as_str()?;
        let ranks = r.get("ranks")?.as_u64()?;
        let mode = if mode == "serialised" { ", serial" } else { "" };
        let key = format!(
            "{delay} us{mode}, {ranks} rank{}",
            if ranks == 1 { "" } else { "s" }
        );
        bars.push(Bar {
            label: format!("{key}: native"),
            value: r.get("native_s")?.as_f64()?,
            range: None,
            highlight: false,
        });
        bars.push(Bar {
            label: format!("{key}: berth"),
            value: r.get("berth_s")?.as_f64()?,
            range: None,
            highlight: true,
        });
    }
    Some(BarChart {
        title: "Pynamic start-up on a simulated parallel filesystem (s)".to_string(),
        unit: "s".to_string(),
        log: true,
        bars,
    })
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut results = PathBuf::from("bench/results");
    let mut out = PathBuf::from("docs/charts");
    let mut start: Option<PathBuf> = None;
    let mut pynamic: Option<PathBuf> = None;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let value = it.next().map(PathBuf::from);
        match (a.as_str(), value) {
            ("--results", Some(v)) => results = v,
            ("--out", Some(v)) => out = v,
            ("--start", Some(v)) => start = Some(v),
            ("--pynamic", Some(v)) => pynamic = Some(v),
            _ => {
                eprintln!("usage: bench-charts [--results DIR] [--out DIR] [--start FILE] [--pynamic FILE]");
                return ExitCode::from(2);
            }
        }
    }
    let start = start.or_else(|| {
        newest(&results, "start-", |v| {
            v.get("smoke") == Some(&Value::Bool(false))
        })
    });
    let pynamic = pynamic.or_else(|| {
        newest(&results, "pynamic-", |v| {
            v.as_array().is_some_and(|rows| {
                rows.len() > 6 && rows[0].get("modules").and_then(Value::as_u64) == Some(300)
            })
        })
    });
    let mut charts: Vec<(String, BarChart)> = Vec::new();
    if let Some(v) = start.as_deref().and_then(load) {
        charts.extend(start_charts(&v));
    }
    if let Some(c) = pynamic
        .as_deref()
        .and_then(load)
        .as_ref()
        .and_then(pynamic_chart)
    {
        charts.push(("pynamic.svg".to_string(), c));
    }
    if charts.is_empty() {
        eprintln!(
            "bench-charts: no results in {}: run bench/start.sh and bench/pynamic.sh",
            results.display()
        );
        return ExitCode::from(1);
    }
    if let Err(e) = fs::create_dir_all(&out) {
        eprintln!("bench-charts: cannot create {}: {e}", out.display());
        return ExitCode::from(1);
    }
    for (name, chart) in charts {
        let path = out.join(name);
        if let Err(e) = fs::write(&path, chart.render()) {
            eprintln!("bench-charts: cannot write {}: {e}", path.display());
            return ExitCode::from(1);
        }
        println!("{}", path.display());
    }
    ExitCode::SUCCESS
}
