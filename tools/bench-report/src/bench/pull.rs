//! `bench/pull.sh`: registry to runnable image, berth against podman and
//! the skopeo + umoci + mksquashfs pipeline.

use serde_json::Value;

use super::{med_range, need, Headline, Section};
use crate::fmt::{self, Table};
use crate::results::{num, text, ResultFile};
use crate::svg::{Bar, BarChart};

const TOOLS: &[(&str, &str, &str)] = &[
    ("berth", "berth pull", "squashfs"),
    ("podman", "podman pull (rootless)", "overlay storage"),
    (
        "peer",
        "skopeo copy + umoci unpack + mksquashfs",
        "squashfs (gzip, 64 KiB)",
    ),
];

/// Renders the pull section.
pub fn render(f: &ResultFile) -> Result<Section, String> {
    let v = &f.json;
    let mut s = Section::default();
    let berth_fs = text(v, "/berth/squashfs_written").unwrap_or("zstd 131072");
    let mut t = Table::new(&["tool", "result", ">median [min–max] s", ">result MB"]);
    let mut bars = Vec::new();
    for (key, label, result) in TOOLS {
        let Some(tool) = v.pointer(&format!("/summary/tools/{key}")) else {
            continue;
        };
        let result = if *key == "berth" {
            format!("squashfs ({berth_fs})")
        } else {
            result.to_string()
        };
        t.row(vec![
            label.to_string(),
            result,
            med_range(tool, 1.0),
            num(tool, "/result_bytes")
                .map(|b| format!("{:.1}", b / 1e6))
                .unwrap_or_default(),
        ]);
        if let Some(m) = num(tool, "/median") {
            bars.push(Bar {
                label: label.to_string(),
                value: m,
                range: num(tool, "/min").zip(num(tool, "/max")),
                highlight: *key == "berth",
            });
        }
    }
    s.set("pull.table", t.render());
    s.set("pull.source", f.name());
    s.set("pull.runs", format!("{}", need(v, "/runs")?));
    s.set(
        "pull.image",
        format!(
            "{} layer(s), {:.1} MB compressed, {:.0} MB and {} entries unpacked",
            need(v, "/image/layers")?,
            need(v, "/image/compressed_bytes")? / 1e6,
            need(v, "/image/rootfs_bytes")? / 1e6,
            fmt::count(need(v, "/image/rootfs_entries")?)
        ),
    );
    let steps: Vec<String> = ["skopeo", "umoci", "mksquashfs"]
        .iter()
        .filter_map(|k| {
            num(v, &format!("/summary/peer_steps/{k}/median"))
                .map(|m| format!("{k} {}", fmt::duration(m)))
        })
        .collect();
    s.set("pull.peer_steps", steps.join(", "));
    let berth = need(v, "/summary/tools/berth/median")?;
    s.set("pull.berth", fmt::duration(berth));
    for (peer, ratio_key, figure, limit, target) in [
        (
            "podman",
            "berth/podman",
            "pull to runnable vs podman pull",
            0.5,
            "≤ 0.5",
        ),
        (
            "peer",
            "berth/peer",
            "pull to runnable vs skopeo + umoci + mksquashfs",
            0.2,
            "≥ 5x faster",
        ),
    ] {
        let Some(p) = num(v, &format!("/summary/tools/{peer}/median")) else {
            s.set(format!("pull.{peer}"), "not measured");
            s.set(format!("pull.ratio_{peer}"), "n/a");
            s.set(format!("pull.speedup_{peer}"), "n/a");
            continue;
        };
        let r = num(v, &format!("/summary/ratios/{ratio_key}/median")).unwrap_or(berth / p);
        s.set(format!("pull.{peer}"), fmt::duration(p));
        s.set(format!("pull.ratio_{peer}"), fmt::ratio(r));
        s.set(format!("pull.speedup_{peer}"), fmt::ratio(1.0 / r));
        s.headline.push(Headline {
            benchmark: "pull".into(),
            figure: figure.into(),
            berth: fmt::duration(berth),
            peer: fmt::duration(p),
            ratio: if limit < 0.3 {
                format!("{}x faster", fmt::ratio(1.0 / r))
            } else {
                fmt::ratio(r)
            },
            target: target.into(),
            met: r <= limit,
        });
    }
    s.charts.push((
        "pull.svg".into(),
        BarChart {
            title: "Pull to runnable (median s, min–max)".into(),
            unit: "s".into(),
            log: true,
            bars,
        },
    ));
    Ok(s)
}

/// Whether a JSON is pull.sh's.
pub fn accept(v: &Value) -> bool {
    v.get("benchmark").and_then(Value::as_str) == Some("pull-to-runnable")
}
