//! Number formatting and markdown tables for the report.

/// A duration in seconds, in the unit a reader expects: µs, ms or s, with
/// about three significant digits.
pub fn duration(seconds: f64) -> String {
    if seconds < 1e-3 {
        format!("{} µs", sig3(seconds * 1e6))
    } else if seconds < 1.0 {
        format!("{} ms", sig3(seconds * 1e3))
    } else {
        format!("{} s", sig3(seconds))
    }
}

/// About three significant digits, without an exponent.
pub fn sig3(v: f64) -> String {
    let a = v.abs();
    if a >= 100.0 {
        format!("{v:.0}")
    } else if a >= 10.0 {
        format!("{v:.1}")
    } else if a >= 1.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.3}")
    }
}

/// A ratio: two decimals below 10, one above.
pub fn ratio(v: f64) -> String {
    if v >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

/// An integer with thousands separators.
pub fn count(v: f64) -> String {
    let digits = format!("{:.0}", v.max(0.0));
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// "met" or "missed".
pub fn verdict(met: bool) -> &'static str {
    if met {
        "met"
    } else {
        "**missed**"
    }
}

/// A markdown table built row by row.
#[derive(Debug, Clone, Default)]
pub struct Table {
    header: Vec<String>,
    right: Vec<bool>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with these columns; a column whose name starts with `>` is
    /// right-aligned (numbers), the `>` is dropped.
    pub fn new(columns: &[&str]) -> Self {
        Table {
            header: columns
                .iter()
                .map(|c| c.trim_start_matches('>').to_string())
                .collect(),
            right: columns.iter().map(|c| c.starts_with('>')).collect(),
            rows: Vec::new(),
        }
    }

    /// Adds a row (missing cells are left empty).
    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    /// The table as markdown.
    pub fn render(&self) -> String {
        let line = |cells: &[String]| {
            let mut s = String::from("|");
            for i in 0..self.header.len() {
                s.push(' ');
                s.push_str(cells.get(i).map(String::as_str).unwrap_or(""));
                s.push_str(" |");
            }
            s.push('\n');
            s
        };
        let mut out = line(&self.header);
        out.push('|');
        for r in &self.right {
            out.push_str(if *r { "---:|" } else { "---|" });
        }
        out.push('\n');
        for row in &self.rows {
            out.push_str(&line(row));
        }
        out.truncate(out.trim_end().len());
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_pick_their_unit() {
        assert_eq!(duration(0.0046), "4.60 ms");
        assert_eq!(duration(0.1364), "136 ms");
        assert_eq!(duration(12.005), "12.0 s");
        assert_eq!(duration(0.000_25), "250 µs");
    }

    #[test]
    fn counts_and_ratios() {
        assert_eq!(count(43816.0), "43,816");
        assert_eq!(count(10.0), "10");
        assert_eq!(count(1_000_000.0), "1,000,000");
        assert_eq!(ratio(0.4412), "0.44");
        assert_eq!(ratio(65.47), "65.5");
    }

    #[test]
    fn tables_render_markdown() {
        let mut t = Table::new(&["tool", ">s"]);
        t.row(vec!["berth".into(), "1.18".into()]);
        t.row(vec!["podman".into()]);
        assert_eq!(
            t.render(),
            "| tool | s |\n|---|---:|\n| berth | 1.18 |\n| podman |  |"
        );
    }
}
