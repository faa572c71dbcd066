//! One module per benchmark script: each turns that script's newest JSON
//! into tables, named figures for the prose, charts and headline rows.

pub mod build;
pub mod fileaccess;
pub mod inject;
pub mod layers;
pub mod mpi;
pub mod pull;
pub mod pynamic;
pub mod ranks;
pub mod save;
pub mod settings;
pub mod slurm;
pub mod start;

use serde_json::Value;

use crate::fmt::{self, Table};
use crate::results::ResultFile;
use crate::svg::BarChart;
use crate::template::Values;

/// What one benchmark contributes to the page.
#[derive(Debug, Default)]
pub struct Section {
    /// Named values for the template (`NAME.table`, `NAME.something`).
    pub values: Values,
    /// Charts: file name and chart.
    pub charts: Vec<(String, BarChart)>,
    /// Rows of the headline table.
    pub headline: Vec<Headline>,
}

impl Section {
    /// Sets a template value.
    pub fn set(&mut self, name: impl Into<String>, value: impl Into<String>) {
        self.values.insert(name.into(), value.into());
    }
}

/// One row of the headline table: a figure berth must meet against a peer.
#[derive(Debug, Clone)]
pub struct Headline {
    /// Which benchmark.
    pub benchmark: String,
    /// The figure, in words.
    pub figure: String,
    /// berth's value, formatted.
    pub berth: String,
    /// The peer's (or the reference's) value, formatted.
    pub peer: String,
    /// The comparison, formatted (a ratio, a factor).
    pub ratio: String,
    /// The target, in words.
    pub target: String,
    /// Whether the target is met.
    pub met: bool,
}

/// A benchmark the report knows: the prefix of its result files, a check
/// that a file is of the expected shape, and its renderer.
pub struct Benchmark {
    /// Name in `bench/run.sh --only` and in template names.
    pub name: &'static str,
    /// The script that measures it.
    pub script: &'static str,
    /// Result file prefix in bench/results.
    pub prefix: &'static str,
    /// Whether a result file is this benchmark's, in the current format.
    pub accept: fn(&Value) -> bool,
    /// Renders its section.
    pub render: fn(&ResultFile) -> Result<Section, String>,
}

/// Every benchmark, in the page's order.
pub const ALL: &[Benchmark] = &[
    Benchmark {
        name: "pull",
        script: "bench/pull.sh",
        prefix: "pull-",
        accept: pull::accept,
        render: pull::render,
    },
    Benchmark {
        name: "start",
        script: "bench/start.sh",
        prefix: "start-",
        accept: start::accept,
        render: start::render,
    },
    Benchmark {
        name: "settings",
        script: "bench/squashfs-settings.sh",
        prefix: "squashfs-settings-",
        accept: settings::accept,
        render: settings::render,
    },
    Benchmark {
        name: "pynamic",
        script: "bench/pynamic.sh",
        prefix: "pynamic-",
        accept: pynamic::accept,
        render: pynamic::render,
    },
    Benchmark {
        name: "fileaccess",
        script: "bench/fileaccess.sh",
        prefix: "fileaccess-",
        accept: fileaccess::accept,
        render: fileaccess::render,
    },
    Benchmark {
        name: "ranks",
        script: "bench/ranks.sh",
        prefix: "ranks-",
        accept: ranks::accept,
        render: ranks::render,
    },
    Benchmark {
        name: "inject",
        script: "bench/inject.sh",
        prefix: "inject-",
        accept: inject::accept,
        render: inject::render,
    },
    Benchmark {
        name: "mpi",
        script: "bench/mpi.sh",
        prefix: "mpi-",
        accept: mpi::accept,
        render: mpi::render,
    },
    Benchmark {
        name: "slurm",
        script: "bench/slurm.sh",
        prefix: "slurm-",
        accept: slurm::accept,
        render: slurm::render,
    },
    Benchmark {
        name: "build",
        script: "bench/build.sh",
        prefix: "build-",
        accept: build::accept,
        render: build::render,
    },
    Benchmark {
        name: "layers",
        script: "bench/layers.sh",
        prefix: "layers-",
        accept: layers::accept,
        render: layers::render,
    },
    Benchmark {
        name: "save",
        script: "bench/save.sh",
        prefix: "save-",
        accept: save::accept,
        render: save::render,
    },
];

/// The headline table of every section's rows.
pub fn headline_table(rows: &[Headline]) -> String {
    let mut t = Table::new(&[
        "benchmark",
        "figure",
        ">berth",
        ">peer",
        ">comparison",
        "target",
        "",
    ]);
    for h in rows {
        t.row(vec![
            h.benchmark.clone(),
            h.figure.clone(),
            h.berth.clone(),
            h.peer.clone(),
            h.ratio.clone(),
            h.target.clone(),
            fmt::verdict(h.met).to_string(),
        ]);
    }
    t.render()
}

/// A required number at `pointer`, or an error naming it.
pub fn need(v: &Value, pointer: &str) -> Result<f64, String> {
    crate::results::num(v, pointer).ok_or_else(|| format!("no number at {pointer}"))
}

/// "median [min–max]" of a summary object with those keys, each value
/// scaled to seconds by `to_s` and formatted as a duration.
pub fn med_range(s: &Value, to_s: f64) -> String {
    let g = |k: &str| s.get(k).and_then(Value::as_f64);
    match (g("median"), g("min"), g("max")) {
        (Some(m), Some(lo), Some(hi)) => format!(
            "{} [{}–{}]",
            fmt::duration(m * to_s),
            fmt::sig3(lo * to_s / unit_of(m * to_s)),
            fmt::sig3(hi * to_s / unit_of(m * to_s))
        ),
        (Some(m), _, _) => fmt::duration(m * to_s),
        _ => String::new(),
    }
}

/// The unit (in seconds) that `fmt::duration` picks for `seconds`.
fn unit_of(seconds: f64) -> f64 {
    if seconds < 1e-3 {
        1e-6
    } else if seconds < 1.0 {
        1e-3
    } else {
        1.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_share_the_median_unit() {
        let s = serde_json::json!({"median": 4.58, "min": 3.96, "max": 8.73});
        assert_eq!(med_range(&s, 1e-3), "4.58 ms [3.96–8.73]");
        let s = serde_json::json!({"median": 0.9, "min": 0.8, "max": 1.3});
        assert_eq!(med_range(&s, 1.0), "900 ms [800–1300]");
    }
}
