//! `bench/fileaccess.sh`: reads and metadata walks inside the container,
//! berth's mount against a kernel squashfs mount and the host directory.

use serde_json::Value;

use super::{Headline, Section};
use crate::fmt::{self, Table};
use crate::results::{num, text, ResultFile};
use crate::svg::{Bar, BarChart};

fn workload_label(w: &str, v: &Value) -> String {
    match w {
        "read" => format!(
            "read {} × {} MiB",
            num(v, "/image/data_files").unwrap_or(0.0),
            num(v, "/image/data_file_mib").unwrap_or(0.0)
        ),
        "find" => "`find /usr`".into(),
        "stat" => "stat of every entry".into(),
        other => other.into(),
    }
}

/// Renders the file access section.
pub fn render(f: &ResultFile) -> Result<Section, String> {
    let v = &f.json;
    let mut s = Section::default();
    let summary = v
        .get("summary")
        .and_then(Value::as_array)
        .ok_or("no summary")?;
    let mut t = Table::new(&[
        "workload",
        "state",
        ">berth",
        ">kernel mount",
        ">host dir",
        ">berth/kernel",
        ">berth speed vs kernel",
    ]);
    let mut bars = Vec::new();
    for e in summary {
        let (Some(w), Some(state)) = (text(e, "/workload"), text(e, "/state")) else {
            continue;
        };
        let label = workload_label(w, v);
        let cell = |m: &str| {
            num(e, &format!("/methods/{m}/median"))
                .map(|x| {
                    let mbs = num(e, &format!("/methods/{m}/mb_per_s"))
                        .map(|r| format!(" ({r:.0} MB/s)"))
                        .unwrap_or_default();
                    format!("{}{mbs}", fmt::duration(x))
                })
                .unwrap_or_default()
        };
        let speed = num(e, "/target/berth_speed_vs_kernel");
        t.row(vec![
            label.clone(),
            state.into(),
            cell("berth"),
            cell("kernel"),
            cell("host"),
            num(e, "/ratios/berth~1kernel/median")
                .map(fmt::ratio)
                .unwrap_or_default(),
            speed.map(fmt::ratio).unwrap_or_default(),
        ]);
        if let Some(x) = speed {
            s.set(format!("fileaccess.{w}.{state}.speed"), fmt::ratio(x));
            if state == "warm" {
                s.headline.push(Headline {
                    benchmark: "file access".into(),
                    figure: format!("{label}, warm, vs kernel squashfs mount"),
                    berth: cell("berth"),
                    peer: cell("kernel"),
                    ratio: format!("{} of its speed", fmt::ratio(x)),
                    target: "≥ 0.8".into(),
                    met: x >= 0.8,
                });
            }
        }
        for m in ["berth", "kernel", "host"] {
            if let Some(x) = num(e, &format!("/methods/{m}/median")) {
                bars.push(Bar {
                    label: format!("{w} {state}: {m}"),
                    value: x,
                    range: None,
                    highlight: m == "berth",
                });
            }
        }
    }
    s.set("fileaccess.table", t.render());
    s.set("fileaccess.source", f.name());
    s.set(
        "fileaccess.runs",
        format!("{}", num(v, "/runs").unwrap_or(0.0)),
    );
    s.set(
        "fileaccess.usr_entries",
        fmt::count(num(v, "/image/usr_entries").unwrap_or(0.0)),
    );
    s.set(
        "fileaccess.data",
        format!(
            "{} × {} MiB",
            num(v, "/image/data_files").unwrap_or(0.0),
            num(v, "/image/data_file_mib").unwrap_or(0.0)
        ),
    );
    s.charts.push((
        "fileaccess.svg".into(),
        BarChart {
            title: "File access inside the container (median s)".into(),
            unit: "s".into(),
            log: true,
            bars,
        },
    ));
    Ok(s)
}

/// Whether a JSON is fileaccess.sh's.
pub fn accept(v: &Value) -> bool {
    v.get("benchmark").and_then(Value::as_str) == Some("file-access")
}
