//! A horizontal bar chart as SVG text: one bar per row, an optional
//! interquartile whisker, linear or log10 scale. Hand-written: the charts
//! are simple, and this keeps the dependency list short.

use std::fmt::Write as _;

/// One bar.
#[derive(Debug, Clone, PartialEq)]
pub struct Bar {
    /// Row label.
    pub label: String,
    /// Value (median).
    pub value: f64,
    /// Interquartile range, if known.
    pub range: Option<(f64, f64)>,
    /// Whether this is berth's bar (drawn in the accent colour).
    pub highlight: bool,
}

/// A chart.
#[derive(Debug, Clone, PartialEq)]
pub struct BarChart {
    /// Title above the chart.
    pub title: String,
    /// Unit of the values, for the axis.
    pub unit: String,
    /// Use a log10 scale (values spanning orders of magnitude).
    pub log: bool,
    /// The bars, top to bottom.
    pub bars: Vec<Bar>,
}

const LABEL_W: f64 = 260.0;
const PLOT_W: f64 = 420.0;
const ROW_H: f64 = 26.0;
const TOP: f64 = 40.0;

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

impl BarChart {
    fn scale(&self, max: f64, min_pos: f64) -> impl Fn(f64) -> f64 + '_ {
        let log = self.log;
        let lo = if log {
            (min_pos / 2.0).log10().floor()
        } else {
            0.0
        };
        let hi = if log {
            max.log10().ceil().max(lo + 1.0)
        } else {
            max * 1.1
        };
        move |v: f64| {
            let x = if log {
                (v.max(f64::MIN_POSITIVE).log10() - lo) / (hi - lo)
            } else {
                v / hi
            };
            LABEL_W + x.clamp(0.0, 1.0) * PLOT_W
        }
    }

    /// Renders the chart.
    pub fn render(&self) -> String {
        let max = self
            .bars
            .iter()
            .map(|b| b.range.map_or(b.value, |r| r.1.max(b.value)))
            .fold(0.0_f64, f64::max)
            .max(f64::MIN_POSITIVE);
        let min_pos = self
            .bars
            .iter()
            .map(|b| b.value)
            .filter(|v| *v > 0.0)
            .fold(max, f64::min);
        let x = self.scale(max, min_pos);
        let height = TOP + ROW_H * self.bars.len() as f64 + 30.0;
        let width = LABEL_W + PLOT_W + 90.0;
        let mut s = String::new();
        let _ = writeln!(
            s,
            r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" font-size="12">"#
        );
        let _ = writeln!(s, r#"<rect width="100%" height="100%" fill="white"/>"#);
        let _ = writeln!(
            s,
            r#"<text x="10" y="22" font-size="14" font-weight="bold">{}</text>"#,
            escape(&self.title)
        );
        for (i, b) in self.bars.iter().enumerate() {
            let y = TOP + ROW_H * i as f64;
            let color = if b.highlight { "#d9480f" } else { "#4a6fa5" };
            let x0 = x(if self.log { min_pos / 2.0 } else { 0.0 });
            let x1 = x(b.value);
            let _ = writeln!(
                s,
                r#"<text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"#,
                LABEL_W - 8.0,
                y + 16.0,
                escape(&b.label)
            );
            let _ = writeln!(
                s,
                r#"<rect x="{x0:.1}" y="{:.1}" width="{:.1}" height="{:.1}" fill="{color}"/>"#,
                y + 4.0,
                (x1 - x0).max(1.0),
                ROW_H - 8.0
            );
            if let Some((lo, hi)) = b.range {
                let _ = writeln!(
                    s,
                    r#"<line x1="{:.1}" x2="{:.1}" y1="{:.1}" y2="{:.1}" stroke="black"/>"#,
                    x(lo),
                    x(hi),
                    y + ROW_H / 2.0,
                    y + ROW_H / 2.0
                );
            }
            let _ = writeln!(
                s,
                r#"<text x="{:.1}" y="{:.1}">{} {}</text>"#,
                x1.max(x(b.range.map_or(0.0, |r| r.1))) + 6.0,
                y + 16.0,
                fmt_value(b.value),
                escape(&self.unit)
            );
        }
        let axis = if self.log {
            "log scale"
        } else {
            "linear scale"
        };
        let _ = writeln!(
            s,
            r#"<text x="{LABEL_W}" y="{:.1}" fill="gray">{} ({axis})</text>"#,
            height - 8.0,
            escape(&self.unit)
        );
        s.push_str("</svg>\n");
        s
    }
}

/// Three significant digits, plainly.
pub fn fmt_value(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0}")
    } else if v >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chart(log: bool) -> BarChart {
        BarChart {
            title: "t <1>".into(),
            unit: "ms".into(),
            log,
            bars: vec![
                Bar {
                    label: "berth".into(),
                    value: 4.6,
                    range: Some((4.3, 4.8)),
                    highlight: true,
                },
                Bar {
                    label: "podman".into(),
                    value: 136.0,
                    range: None,
                    highlight: false,
                },
            ],
        }
    }

    #[test]
    fn renders_bars_labels_and_escapes() {
        let svg = chart(true).render();
        assert!(svg.starts_with("<svg"));
        assert_eq!(svg.matches("<rect").count(), 3); // background + 2 bars
        assert!(svg.contains("t &lt;1&gt;"));
        assert!(svg.contains(">berth<") && svg.contains("4.60 ms") && svg.contains("136 ms"));
        assert!(svg.contains("#d9480f"));
    }

    #[test]
    fn longer_bars_for_larger_values() {
        for log in [false, true] {
            let c = chart(log);
            let x = c.scale(136.0, 4.6);
            assert!(x(4.6) < x(136.0), "log={log}");
            assert!(x(136.0) <= LABEL_W + PLOT_W);
        }
    }
}
