//! `bench/pynamic.sh`: the seeds' Pynamic study, Python start-up from
//! hundreds of shared libraries on a simulated parallel filesystem,
//! natively against one berth image file on the same filesystem.

use serde_json::Value;

use super::{need, Headline, Section};
use crate::fmt::{self, Table};
use crate::results::{num, text, ResultFile};
use crate::svg::{Bar, BarChart};

/// One measured configuration.
struct Row {
    delay_us: f64,
    serial: bool,
    ranks: f64,
    native_s: f64,
    berth_s: f64,
    native_requests: f64,
    berth_requests: f64,
}

fn rows(v: &Value) -> Result<Vec<Row>, String> {
    v.get("rows")
        .and_then(Value::as_array)
        .ok_or("no rows")?
        .iter()
        .map(|r| {
            Ok(Row {
                delay_us: need(r, "/delay_us")?,
                serial: text(r, "/metadata_server") == Some("serialised"),
                ranks: need(r, "/ranks")?,
                native_s: need(r, "/native_s")?,
                berth_s: need(r, "/berth_s")?,
                native_requests: need(r, "/native_requests")?,
                berth_requests: need(r, "/berth_requests")?,
            })
        })
        .collect()
}

fn delay(us: f64) -> String {
    if us >= 1000.0 && us % 1000.0 == 0.0 {
        format!("{:.0} ms", us / 1000.0)
    } else if us >= 1000.0 {
        format!("{} ms", fmt::sig3(us / 1000.0))
    } else {
        format!("{us:.0} µs")
    }
}

/// Renders the Pynamic section.
pub fn render(f: &ResultFile) -> Result<Section, String> {
    let v = &f.json;
    let mut s = Section::default();
    let mut rows = rows(v)?;
    if rows.is_empty() {
        return Err("no rows".into());
    }
    rows.sort_by(|a, b| {
        (a.delay_us, a.serial, a.ranks)
            .partial_cmp(&(b.delay_us, b.serial, b.ranks))
            .unwrap_or(std::cmp::Ordering::Equal)
    });
    let mut t = Table::new(&[
        ">delay per request",
        "metadata server",
        ">ranks",
        ">native s",
        ">berth s",
        ">native/berth",
        ">native requests",
        ">berth requests",
    ]);
    let mut bars = Vec::new();
    for r in &rows {
        let mode = if r.serial { "serialised" } else { "unlimited" };
        t.row(vec![
            delay(r.delay_us),
            mode.into(),
            format!("{}", r.ranks),
            fmt::sig3(r.native_s),
            fmt::sig3(r.berth_s),
            fmt::ratio(r.native_s / r.berth_s),
            fmt::count(r.native_requests),
            fmt::count(r.berth_requests),
        ]);
        let key = format!(
            "{}{}, {} rank{}",
            delay(r.delay_us),
            if r.serial { ", serial" } else { "" },
            r.ranks,
            if r.ranks == 1.0 { "" } else { "s" }
        );
        bars.push(Bar {
            label: format!("{key}: native"),
            value: r.native_s,
            range: None,
            highlight: false,
        });
        bars.push(Bar {
            label: format!("{key}: berth"),
            value: r.berth_s,
            range: None,
            highlight: true,
        });
    }
    s.set("pynamic.table", t.render());
    s.set("pynamic.source", f.name());
    s.set(
        "pynamic.tree",
        format!(
            "{} Python extension modules of {} functions each over {} utility libraries ({} files)",
            need(v, "/tree/modules")?,
            need(v, "/tree/functions")?,
            need(v, "/tree/utils")?,
            need(v, "/tree/files")?
        ),
    );
    // The figures at the highest latency measured (1 ms in a full run).
    let top = rows.iter().map(|r| r.delay_us).fold(0.0, f64::max);
    let at_top: Vec<&Row> = rows.iter().filter(|r| r.delay_us == top).collect();
    let speedups: Vec<f64> = at_top.iter().map(|r| r.native_s / r.berth_s).collect();
    let min = speedups.iter().copied().fold(f64::INFINITY, f64::min);
    let max = speedups.iter().copied().fold(0.0, f64::max);
    let berth_requests = rows.iter().map(|r| r.berth_requests).fold(0.0, f64::max);
    let native_per_rank = rows
        .iter()
        .filter(|r| r.ranks == 1.0)
        .map(|r| r.native_requests)
        .fold(0.0, f64::max);
    let max_ranks = rows.iter().map(|r| r.ranks).fold(0.0, f64::max);
    s.set("pynamic.top_delay", delay(top));
    s.set("pynamic.speedup_min", fmt::ratio(min));
    s.set("pynamic.speedup_max", fmt::ratio(max));
    s.set("pynamic.berth_requests", fmt::count(berth_requests));
    s.set("pynamic.native_requests", fmt::count(native_per_rank));
    s.set("pynamic.max_ranks", format!("{max_ranks}"));
    let zero: Vec<&Row> = rows
        .iter()
        .filter(|r| r.delay_us == 0.0 && r.ranks == 1.0)
        .collect();
    s.set(
        "pynamic.zero_delay_one_rank",
        zero.first()
            .map(|r| {
                format!(
                    "native {} s, berth {} s",
                    fmt::sig3(r.native_s),
                    fmt::sig3(r.berth_s)
                )
            })
            .unwrap_or_else(|| "not measured".into()),
    );
    let worst = at_top
        .iter()
        .min_by(|a, b| (a.native_s / a.berth_s).total_cmp(&(b.native_s / b.berth_s)));
    if let Some(w) = worst {
        s.headline.push(Headline {
            benchmark: "pynamic".into(),
            figure: format!(
                "start-up at {} per metadata request, worst configuration",
                delay(top)
            ),
            berth: format!("{} s", fmt::sig3(w.berth_s)),
            peer: format!("{} s native", fmt::sig3(w.native_s)),
            ratio: format!("{}x faster", fmt::ratio(min)),
            target: "≥ 7x faster at 1 ms".into(),
            met: top >= 1000.0 && min >= 7.0,
        });
    }
    s.headline.push(Headline {
        benchmark: "pynamic".into(),
        figure: format!("metadata requests per node, 1 to {max_ranks} ranks"),
        berth: fmt::count(berth_requests),
        peer: format!("{} per rank native", fmt::count(native_per_rank)),
        ratio: String::new(),
        target: "≤ 10".into(),
        met: berth_requests <= 10.0,
    });
    s.charts.push((
        "pynamic.svg".into(),
        BarChart {
            title: "Pynamic start-up on a simulated parallel filesystem (s)".into(),
            unit: "s".into(),
            log: true,
            bars,
        },
    ));
    Ok(s)
}

/// Whether a JSON is pynamic.sh's.
pub fn accept(v: &Value) -> bool {
    v.get("benchmark").and_then(Value::as_str) == Some("pynamic") && num(v, "/tree/files").is_some()
}
