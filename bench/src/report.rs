//! Output: fixed-width tables for people (stdout, or stderr with `--json`) and JSON lines for
//! machines (stdout with `--json`). Progress and error details always go to stderr.

use bson::{Bson, Document};

use crate::accounts;
use crate::runner::RunStats;

/// Where results go.
#[derive(Clone, Copy, Debug)]
pub struct Output {
    pub json: bool,
}

impl Output {
    /// A line of the human-readable report.
    pub fn text(&self, line: &str) {
        if self.json {
            eprintln!("{line}");
        } else {
            println!("{line}");
        }
    }

    /// One JSON object on its own line (only with `--json`).
    pub fn json(&self, record: Document) {
        if self.json {
            println!("{}", Bson::Document(record).into_relaxed_extjson());
        }
    }
}

/// A column: title and width; text columns are left-aligned, numbers right-aligned.
#[derive(Clone, Copy, Debug)]
pub struct Column {
    pub title: &'static str,
    pub width: usize,
    pub numeric: bool,
}

impl Column {
    pub const fn text(title: &'static str, width: usize) -> Self {
        Column {
            title,
            width,
            numeric: false,
        }
    }

    pub const fn number(title: &'static str, width: usize) -> Self {
        Column {
            title,
            width,
            numeric: true,
        }
    }
}

/// A table printed one row at a time with fixed column widths (a wider value just pushes
/// the rest of its row right).
#[derive(Clone, Debug)]
pub struct Table {
    columns: Vec<Column>,
}

impl Table {
    pub fn new(columns: Vec<Column>) -> Self {
        Table { columns }
    }

    pub fn header(&self) -> String {
        let titles: Vec<String> = self.columns.iter().map(|c| c.title.to_string()).collect();
        self.row(&titles)
    }

    pub fn row(&self, values: &[String]) -> String {
        let cells: Vec<String> = self
            .columns
            .iter()
            .zip(values)
            .map(|(column, value)| {
                if column.numeric {
                    format!("{value:>width$}", width = column.width)
                } else {
                    format!("{value:<width$}", width = column.width)
                }
            })
            .collect();
        cells.join("  ").trim_end().to_string()
    }
}

/// `1234567.8` → `1,234,568`.
pub fn thousands(value: f64) -> String {
    let digits = format!("{:.0}", value.max(0.0));
    let mut grouped = String::with_capacity(digits.len() + digits.len() / 3);
    for (index, digit) in digits.chars().enumerate() {
        if index > 0 && (digits.len() - index) % 3 == 0 {
            grouped.push(',');
        }
        grouped.push(digit);
    }
    grouped
}

/// The latency and rate figures of a run, shared by every table and JSON record.
pub struct Figures {
    pub seconds: f64,
    pub ops: u64,
    pub ops_per_sec: f64,
    pub docs_per_sec: f64,
    pub p50_us: u64,
    pub p99_us: u64,
    pub p999_us: u64,
    pub max_us: u64,
    pub errors: u64,
    /// Whole-transaction retries of the counted operations.
    pub retries: u64,
    /// Retries ÷ all attempts (committed + retried).
    pub conflict_rate: f64,
}

impl Figures {
    pub fn of(stats: &RunStats) -> Self {
        Figures {
            seconds: stats.measured.as_secs_f64(),
            ops: stats.ops,
            ops_per_sec: stats.ops_per_sec(),
            docs_per_sec: stats.docs_per_sec(),
            p50_us: stats.latency_us(0.5),
            p99_us: stats.latency_us(0.99),
            p999_us: stats.latency_us(0.999),
            max_us: stats.max_latency_us(),
            errors: stats.errors.total(),
            retries: stats.retries,
            conflict_rate: accounts::conflict_rate(stats.ops, stats.retries),
        }
    }

    /// Adds the figures to a JSON record.
    pub fn append_to(&self, record: &mut Document) {
        record.insert("seconds", round3(self.seconds));
        record.insert("ops", self.ops as i64);
        record.insert("ops_per_sec", round3(self.ops_per_sec));
        record.insert("docs_per_sec", round3(self.docs_per_sec));
        record.insert("p50_us", self.p50_us as i64);
        record.insert("p99_us", self.p99_us as i64);
        record.insert("p999_us", self.p999_us as i64);
        record.insert("max_us", self.max_us as i64);
        record.insert("errors", self.errors as i64);
    }

    /// Adds the retry figures of a transaction workload to a JSON record.
    pub fn append_retries_to(&self, record: &mut Document) {
        record.insert("retries", self.retries as i64);
        record.insert(
            "conflict_rate",
            (self.conflict_rate * 10_000.0).round() / 10_000.0,
        );
    }

    /// The `retries` and `conflict%` cells: figures for a transaction workload, "-" otherwise.
    pub fn retry_cells(&self, transactional: bool) -> [String; 2] {
        if transactional {
            [
                self.retries.to_string(),
                format!("{:.1}", self.conflict_rate * 100.0),
            ]
        } else {
            ["-".to_string(), "-".to_string()]
        }
    }
}

fn round3(value: f64) -> f64 {
    (value * 1000.0).round() / 1000.0
}

/// Prints, on stderr, each kind of error a run had: count and first message.
pub fn print_errors(context: &str, stats: &RunStats) {
    for (kind, count, message) in stats.errors.kinds() {
        eprintln!("  {context}: {count} x {kind}; first: {message}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thousands_groups_digits() {
        assert_eq!(thousands(0.4), "0");
        assert_eq!(thousands(999.0), "999");
        assert_eq!(thousands(1000.0), "1,000");
        assert_eq!(thousands(1234567.8), "1,234,568");
    }

    #[test]
    fn tables_align() {
        let table = Table::new(vec![Column::text("name", 6), Column::number("n", 5)]);
        assert_eq!(table.header(), "name        n");
        assert_eq!(table.row(&["ab".into(), "12".into()]), "ab         12");
    }
}
