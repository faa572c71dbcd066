//! `bench/layers.sh`: pulls of a many-layer image through a
//! bandwidth-limiting proxy: berth (parallel downloads, then serial) and
//! podman from empty storage, and both updating to a tag that shares all
//! layers but one.

use serde_json::Value;

use super::{Headline, Section};
use crate::fmt::{self, Table};
use crate::results::{num, ResultFile};

const CASES: &[(&str, &str)] = &[
    ("cold-berth", "berth pull, empty store (8 connections)"),
    ("cold-berth-serial", "berth pull, empty store, 1 connection"),
    ("cold-podman", "podman pull, empty storage"),
    ("update-berth", "berth pull of the next tag (layer cache)"),
    ("update-podman", "podman pull of the next tag"),
    (
        "big-berth",
        "one big layer: berth pull (range requests in parts)",
    ),
    (
        "big-berth-serial",
        "one big layer: berth pull, 1 connection",
    ),
    ("big-podman", "one big layer: podman pull"),
];

/// Renders the many-layer section.
pub fn render(f: &ResultFile) -> Result<Section, String> {
    let v = &f.json;
    let mut s = Section::default();
    let mut t = Table::new(&["case", ">median [min–max] s"]);
    let get = |case: &str, key: &str| num(v, &format!("/summary/{case}/{key}"));
    for (case, what) in CASES {
        let (Some(med), Some(lo), Some(hi)) =
            (get(case, "median"), get(case, "min"), get(case, "max"))
        else {
            continue;
        };
        t.row(vec![
            (*what).to_string(),
            format!("{} [{}–{}]", fmt::sig3(med), fmt::sig3(lo), fmt::sig3(hi)),
        ]);
    }
    for (kind, peer, target) in [
        ("cold", "cold-podman", 1.0),
        ("update", "update-podman", 1.0),
    ] {
        let mine = format!("{kind}-berth");
        if let (Some(b), Some(p)) = (get(&mine, "median"), get(peer, "median")) {
            let r = b / p;
            s.headline.push(Headline {
                benchmark: "layers".into(),
                figure: format!("{kind} pull of a many-layer image vs podman pull"),
                berth: format!("{} s", fmt::sig3(b)),
                peer: format!("{} s", fmt::sig3(p)),
                ratio: format!("{r:.2}"),
                target: format!("≤ {target}"),
                met: r <= target,
            });
        }
    }
    let ratio = |a: &str, b: &str| match (get(a, "median"), get(b, "median")) {
        (Some(x), Some(y)) => format!("{:.2}", x / y),
        _ => "n/a".to_string(),
    };
    s.set("layers.table", t.render());
    s.set("layers.source", f.name());
    s.set("layers.runs", format!("{}", num(v, "/runs").unwrap_or(0.0)));
    s.set(
        "layers.layers",
        format!("{}", num(v, "/layers").unwrap_or(0.0)),
    );
    s.set(
        "layers.layer_mib",
        format!("{}", num(v, "/layer_mib").unwrap_or(0.0)),
    );
    s.set(
        "layers.rate_mib",
        format!("{}", num(v, "/rate_mib_per_connection").unwrap_or(0.0)),
    );
    s.set(
        "layers.parallel_vs_serial",
        ratio("cold-berth", "cold-berth-serial"),
    );
    s.set("layers.update_vs_cold", ratio("update-berth", "cold-berth"));
    s.set(
        "layers.big_mib",
        format!("{}", num(v, "/big_mib").unwrap_or(0.0)),
    );
    s.set(
        "layers.big_vs_serial",
        ratio("big-berth", "big-berth-serial"),
    );
    s.set("layers.big_vs_podman", ratio("big-berth", "big-podman"));
    Ok(s)
}

/// Whether a JSON is layers.sh's.
pub fn accept(v: &Value) -> bool {
    v.get("benchmark").and_then(Value::as_str) == Some("layers")
}
