//! `bench/mpi.sh`: MPI ping-pong natively, in containers with the image's
//! MPI, and with the host's MPI injected.

use serde_json::Value;

use super::{Headline, Section};
use crate::fmt::Table;
use crate::results::{num, text, ResultFile};

const VARIANTS: &[&str] = &["native", "image", "host"];

/// Renders the MPI section.
pub fn render(f: &ResultFile) -> Result<Section, String> {
    let v = &f.json;
    let mut s = Section::default();
    let mut t = Table::new(&[
        "variant",
        "how",
        ">latency µs (8 B)",
        ">bandwidth MB/s (1 MiB)",
        ">latency / native",
        ">bandwidth / native",
    ]);
    for var in VARIANTS {
        let (Some(lat), Some(bw)) = (
            num(v, &format!("/summary/{var}/latency_us")),
            num(v, &format!("/summary/{var}/bandwidth_MBps")),
        ) else {
            continue;
        };
        let rl = num(v, &format!("/ratios/{var}/latency"));
        let rb = num(v, &format!("/ratios/{var}/bandwidth"));
        t.row(vec![
            format!("`{var}`"),
            text(v, &format!("/how/{var}")).unwrap_or("").to_string(),
            format!("{lat:.2}"),
            format!("{bw:.0}"),
            rl.map(|r| format!("{r:.3}")).unwrap_or_default(),
            rb.map(|r| format!("{r:.3}")).unwrap_or_default(),
        ]);
        if let (Some(rl), Some(rb)) = (rl, rb) {
            let native_lat = num(v, "/summary/native/latency_us").unwrap_or(0.0);
            let native_bw = num(v, "/summary/native/bandwidth_MBps").unwrap_or(0.0);
            s.headline.push(Headline {
                benchmark: "mpi".into(),
                figure: format!("ping-pong latency, `{var}` MPI in the container"),
                berth: format!("{lat:.2} µs"),
                peer: format!("{native_lat:.2} µs native"),
                ratio: format!("{rl:.3}"),
                target: "≤ 1.02".into(),
                met: rl <= 1.02,
            });
            s.headline.push(Headline {
                benchmark: "mpi".into(),
                figure: format!("ping-pong bandwidth, `{var}` MPI in the container"),
                berth: format!("{bw:.0} MB/s"),
                peer: format!("{native_bw:.0} MB/s native"),
                ratio: format!("{rb:.3}"),
                target: "≥ 0.98".into(),
                met: rb >= 0.98,
            });
        }
    }
    s.set("mpi.table", t.render());
    s.set("mpi.source", f.name());
    s.set("mpi.runs", format!("{}", num(v, "/runs").unwrap_or(0.0)));
    Ok(s)
}

/// Whether a JSON is mpi.sh's.
pub fn accept(v: &Value) -> bool {
    v.get("benchmark").and_then(Value::as_str) == Some("mpi-pingpong")
}
