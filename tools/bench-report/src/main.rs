//! `bench-report --results DIR --template FILE --doc FILE --charts DIR
//! [--allow-smoke]`
//!
//! Writes docs/benchmarks.md and its SVG charts from the JSON that the
//! scripts in `bench/` leave in `bench/results`: for every benchmark the
//! newest full (non-smoke) result, its tables, the figures the template's
//! prose names, a chart, and the headline table of targets. The prose lives
//! in the template (`bench/report.md.in`) with `{{name}}` placeholders, so
//! every number on the page comes from a result file; a placeholder the
//! results cannot fill is an error, not a stale number.
//! `bench/run.sh` runs it after the benchmarks.

#![forbid(unsafe_code)]

mod bench;
mod fmt;
mod results;
mod svg;
mod template;

use std::collections::BTreeMap;
use std::fs;
use std::path::PathBuf;
use std::process::ExitCode;

use serde_json::Value;

use bench::{Headline, ALL};
use results::ResultFile;
use template::Values;

/// Command-line options.
struct Options {
    results: PathBuf,
    template: PathBuf,
    doc: PathBuf,
    charts: PathBuf,
    allow_smoke: bool,
}

const USAGE: &str = "usage: bench-report [--results DIR] [--template FILE] [--doc FILE] [--charts DIR] [--allow-smoke]";

fn parse_args() -> Result<Options, String> {
    let mut o = Options {
        results: PathBuf::from("bench/results"),
        template: PathBuf::from("bench/report.md.in"),
        doc: PathBuf::from("docs/benchmarks.md"),
        charts: PathBuf::from("docs/charts"),
        allow_smoke: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        if a == "--allow-smoke" {
            o.allow_smoke = true;
            continue;
        }
        let value = it.next().map(PathBuf::from).ok_or(USAGE)?;
        match a.as_str() {
            "--results" => o.results = value,
            "--template" => o.template = value,
            "--doc" => o.doc = value,
            "--charts" => o.charts = value,
            _ => return Err(USAGE.into()),
        }
    }
    Ok(o)
}

/// Machine and versions, from the result files' `host`, `berth` and
/// `versions` objects (the first file that has a field wins), plus the OS.
fn machine_and_versions(files: &[&ResultFile]) -> (String, String) {
    let first = |pointer: &str| {
        files
            .iter()
            .find_map(|f| f.json.pointer(pointer).filter(|v| !v.is_null()).cloned())
    };
    let as_text = |v: Option<Value>| match v {
        Some(Value::String(s)) => s,
        Some(other) => other.to_string(),
        None => "unknown".into(),
    };
    let os = fs::read_to_string("/etc/os-release")
        .ok()
        .and_then(|s| {
            s.lines().find_map(|l| {
                l.strip_prefix("PRETTY_NAME=")
                    .map(|v| v.trim_matches('"').to_string())
            })
        })
        .unwrap_or_else(|| "unknown OS".into());
    let mem = first("/host/mem")
        .and_then(|m| {
            m.as_str()
                .and_then(|s| s.split_whitespace().next()?.parse::<f64>().ok())
        })
        .map(|kb| format!("{:.0} GiB", kb / 1_048_576.0))
        .unwrap_or_else(|| "unknown memory".into());
    let machine = format!(
        "{} CPUs ({}), {mem}, {os}, kernel {}",
        as_text(first("/host/cpus")),
        as_text(first("/host/cpu_model")),
        as_text(first("/host/kernel"))
    );
    let mut versions: BTreeMap<String, String> = BTreeMap::new();
    for f in files {
        if let Some(m) = f.json.get("versions").and_then(Value::as_object) {
            for (k, v) in m {
                if let Some(s) = v.as_str() {
                    versions.entry(k.clone()).or_insert_with(|| s.to_string());
                }
            }
        }
    }
    let berth = format!(
        "{} (commit {})",
        as_text(first("/berth/version")),
        as_text(first("/berth/git"))
    );
    let mut list = vec![format!("`berth`: {berth}")];
    list.extend(versions.iter().map(|(k, v)| format!("`{k}`: {v}")));
    (machine, list.join("; "))
}

/// `20261129T184105Z` as `2026-11-29 18:41`.
fn utc_stamp(s: &str) -> String {
    match (
        s.get(0..4),
        s.get(4..6),
        s.get(6..8),
        s.get(9..11),
        s.get(11..13),
    ) {
        (Some(y), Some(m), Some(d), Some(hh), Some(mm)) => format!("{y}-{m}-{d} {hh}:{mm}"),
        _ => s.to_string(),
    }
}

fn run(o: &Options) -> Result<(), String> {
    let template = fs::read_to_string(&o.template)
        .map_err(|e| format!("cannot read the template {}: {e}", o.template.display()))?;
    let mut values = Values::new();
    let mut headline: Vec<Headline> = Vec::new();
    let mut charts = Vec::new();
    let mut used: Vec<ResultFile> = Vec::new();
    let mut missing = Vec::new();
    for b in ALL {
        let Some(file) = results::newest(&o.results, b.prefix, o.allow_smoke, b.accept) else {
            missing.push(format!(
                "{} (run `sudo {}` or `sudo bench/run.sh --only {}`)",
                b.name, b.script, b.name
            ));
            continue;
        };
        let section =
            (b.render)(&file).map_err(|e| format!("{}: {}: {e}", b.name, file.path.display()))?;
        values.extend(section.values);
        headline.extend(section.headline);
        charts.extend(section.charts);
        used.push(file);
    }
    if !missing.is_empty() {
        return Err(format!(
            "no {}results in {} for: {}",
            if o.allow_smoke { "" } else { "full " },
            o.results.display(),
            missing.join("; ")
        ));
    }
    let refs: Vec<&ResultFile> = used.iter().collect();
    let (machine, versions) = machine_and_versions(&refs);
    values.insert("report.machine".into(), machine);
    values.insert("report.versions".into(), versions);
    values.insert(
        "report.sources".into(),
        used.iter()
            .map(|f| format!("`{}`", f.name()))
            .collect::<Vec<_>>()
            .join(", "),
    );
    let newest = used
        .iter()
        .filter_map(|f| f.json.get("time_utc").and_then(Value::as_str))
        .max()
        .unwrap_or("unknown");
    values.insert("report.date".into(), utc_stamp(newest));
    values.insert("headline".into(), bench::headline_table(&headline));

    let page = template::fill(&template, &values).map_err(|names| {
        format!(
            "the template {} names values the results do not have: {}",
            o.template.display(),
            names.join(", ")
        )
    })?;
    fs::create_dir_all(&o.charts)
        .map_err(|e| format!("cannot create {}: {e}", o.charts.display()))?;
    for (name, chart) in &charts {
        let path = o.charts.join(name);
        fs::write(&path, chart.render())
            .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    }
    if let Some(parent) = o.doc.parent() {
        fs::create_dir_all(parent)
            .map_err(|e| format!("cannot create {}: {e}", parent.display()))?;
    }
    fs::write(&o.doc, page).map_err(|e| format!("cannot write {}: {e}", o.doc.display()))?;
    println!(
        "bench-report: wrote {} and {} charts in {} from {}",
        o.doc.display(),
        charts.len(),
        o.charts.display(),
        values["report.sources"]
    );
    Ok(())
}

fn main() -> ExitCode {
    let result = parse_args().and_then(|o| run(&o));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("bench-report: {e}");
            ExitCode::from(1)
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn stamps_read_as_dates() {
        assert_eq!(super::utc_stamp("20261129T184105Z"), "2026-11-29 18:41");
        assert_eq!(super::utc_stamp("x"), "x");
    }
}
