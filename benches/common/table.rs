//! Markdown tables with aligned columns, and the cell formats they share.

use std::time::Duration;

use drain_on_drop::DrainSnapshot;

use super::run::Outcome;

/// A Markdown table printed once complete.
pub struct Table {
    header: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    pub fn new(header: &[&str]) -> Table {
        Table { header: header.iter().map(|h| h.to_string()).collect(), rows: Vec::new() }
    }

    pub fn row(&mut self, cells: Vec<String>) {
        assert_eq!(cells.len(), self.header.len(), "one cell per column");
        self.rows.push(cells);
    }

    /// Renders the table; every column padded to its widest cell.
    pub fn render(&self) -> String {
        let width = |i: usize| {
            self.rows
                .iter()
                .map(|r| r[i].chars().count())
                .chain([self.header[i].chars().count(), 3])
                .max()
                .unwrap_or(3)
        };
        let widths: Vec<usize> = (0..self.header.len()).map(width).collect();
        let line = |cells: &[String]| {
            let padded: Vec<String> = cells.iter().zip(&widths).map(|(c, w)| format!("{c:<w$}")).collect();
            format!("| {} |\n", padded.join(" | "))
        };
        let rule: Vec<String> = widths.iter().map(|w| "-".repeat(*w)).collect();
        let mut out = line(&self.header);
        out.push_str(&line(&rule));
        for row in &self.rows {
            out.push_str(&line(row));
        }
        out
    }

    pub fn print(&self) {
        println!("{}", self.render());
    }
}

/// Milliseconds with one decimal.
pub fn ms(d: Duration) -> String {
    format!("{:.1}", d.as_secs_f64() * 1e3)
}

/// `a / b` of two durations.
pub fn ratio(a: Duration, b: Duration) -> f64 {
    a.as_secs_f64() / b.as_secs_f64()
}

/// Connections opened: the connector's count, plus the server's when they
/// differ, plus a mark when the run did not go quiet in time.
pub fn conns(o: &Outcome) -> String {
    let mut cell = o.connections.to_string();
    if o.accepted != o.connections {
        cell.push_str(&format!(" (server {})", o.accepted));
    }
    if !o.settled {
        cell.push_str(" (unsettled)");
    }
    cell
}

/// `drained/early drops` for the layer's runs, `-` otherwise.
pub fn drained(o: &Outcome) -> String {
    match o.drains {
        Some(d) => format!("{}/{}", d.drained, d.drained + d.abandoned + d.skipped + d.failed),
        None => "-".to_string(),
    }
}

/// One of the layer's counters for the layer's runs, `-` otherwise.
pub fn count(o: &Outcome, f: impl Fn(&DrainSnapshot) -> u64) -> String {
    o.drains.as_ref().map_or("-".to_string(), |d| f(d).to_string())
}

/// `yes` or `NO`, for a figure checked against a target.
pub fn verdict(ok: bool) -> &'static str {
    if ok { "yes" } else { "NO" }
}

/// The end of a bench's report: whether every target was reached (or which
/// were missed), the layers' estimates under `title`, and the time the bench
/// took.
pub fn print_verdict(misses: &[String], title: &str, estimates: &[String], took: Duration) {
    if misses.is_empty() {
        println!("Every target reached.");
    } else {
        println!("Targets missed (medians): {}", misses.join("; "));
    }
    println!("\n{title}:");
    for line in estimates {
        println!("{line}");
    }
    println!("\nbench took {:.1} s", took.as_secs_f64());
}
