//! Workloads measured against a baseline: each one's throughput over its baseline's, at the
//! same client count on the same server, with every round merged.
//!
//! Issue 9's targets: `range_10` must reach 0.5× `find_id_events` ops/s, `newest_5` and `or_2`
//! 1/3 of it ("within 3× of a point lookup"), and `insert_indexed` 0.5× `insert_one` docs/s. The
//! ratio is the verdict; the p50 ratio is shown beside it for reading, not judged. `txn2` and
//! `txn2_hot` are shown over `two_writes` and `two_writes_hot` (what the transaction costs) with
//! no target and no verdict. A workload whose baseline was not run gets no ratio.

use std::collections::BTreeSet;

use bson::doc;

use crate::report::{thousands, Column, Figures, Table};
use crate::runner::RunStats;
use crate::target::{label_width, Target};
use crate::workload::{Setup, Workload};
use crate::{Measurement, Settings};

/// A workload's target relative to its baseline.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RelativeTarget {
    pub baseline: Workload,
    /// Smallest acceptable throughput ÷ baseline throughput (`None`: compared, not judged).
    pub min_ratio: Option<f64>,
}

/// The target `workload` is held to, if any.
pub fn target_for(workload: Workload) -> Option<RelativeTarget> {
    let (baseline, min_ratio) = match workload {
        Workload::Range10 => (Workload::FindIdEvents, Some(0.5)),
        Workload::Newest5 | Workload::Or2 => (Workload::FindIdEvents, Some(1.0 / 3.0)),
        Workload::InsertIndexed => (Workload::InsertOne, Some(0.5)),
        Workload::InsertDefaultTtl => (Workload::InsertOne, None),
        Workload::Txn2 => (Workload::TwoWrites, None),
        Workload::Txn2Hot => (Workload::TwoWritesHot, None),
        _ => return None,
    };
    Some(RelativeTarget {
        baseline,
        min_ratio,
    })
}

/// The throughput a target compares: docs/s for inserts, ops/s for reads.
pub fn throughput(workload: Workload, figures: &Figures) -> f64 {
    if workload.inserts() {
        figures.docs_per_sec
    } else {
        figures.ops_per_sec
    }
}

/// `value / base`, or `None` when there is no base to divide by.
pub fn relative(value: f64, base: f64) -> Option<f64> {
    (base > 0.0 && value.is_finite()).then(|| value / base)
}

/// "met" / "missed", or "-" without a ratio or a target.
pub fn verdict(ratio: Option<f64>, min_ratio: Option<f64>) -> &'static str {
    match (ratio, min_ratio) {
        (Some(ratio), Some(min_ratio)) if ratio >= min_ratio => "met",
        (Some(_), Some(_)) => "missed",
        _ => "-",
    }
}

/// Prints the table when any measured workload has a relative target.
pub fn print(targets: &[Target], measurements: &[Measurement], settings: &Settings, docs: u64) {
    let rows: BTreeSet<(usize, usize, Workload)> = measurements
        .iter()
        .filter(|m| target_for(m.workload).is_some())
        .map(|m| (m.target, m.clients, m.workload))
        .collect();
    if rows.is_empty() {
        return;
    }
    let merged = |server: usize, clients: usize, workload: Workload| {
        let runs: Vec<&RunStats> = measurements
            .iter()
            .filter(|m| m.target == server && m.clients == clients && m.workload == workload)
            .map(|m| &m.stats)
            .collect();
        (!runs.is_empty()).then(|| Figures::of(&RunStats::merged(runs)))
    };
    let output = settings.output;
    let table = Table::new(vec![
        Column::text("server", label_width(targets)),
        Column::number("clients", 7),
        Column::text("workload", 14),
        Column::text("baseline", 14),
        Column::number("rate/s", 10),
        Column::number("base_rate/s", 11),
        Column::number("ratio", 6),
        Column::number("target", 6),
        Column::text("verdict", 7),
        Column::number("p50_us", 8),
        Column::number("base_p50", 8),
        Column::number("p50÷base", 8),
    ]);
    let events_reads = rows
        .iter()
        .any(|(_, _, workload)| workload.setup() == Setup::Events);
    output.text("");
    output.text(&format!(
        "relative to a baseline (issue 9 targets; transactions not judged): throughput ÷ the \
         baseline's at the same clients (docs/s for inserts, ops/s otherwise{}), rounds merged",
        if events_reads {
            format!("; events with {} docs", thousands(docs as f64))
        } else {
            String::new()
        }
    ));
    output.text(&table.header());
    for (server, clients, workload) in rows {
        let Some(goal) = target_for(workload) else {
            continue;
        };
        let Some(figures) = merged(server, clients, workload) else {
            continue;
        };
        let base = merged(server, clients, goal.baseline);
        let rate = throughput(workload, &figures);
        let base_rate = base.as_ref().map(|base| throughput(goal.baseline, base));
        let ratio = base_rate.and_then(|base_rate| relative(rate, base_rate));
        let p50_ratio = base
            .as_ref()
            .and_then(|base| relative(figures.p50_us as f64, base.p50_us as f64));
        let met = verdict(ratio, goal.min_ratio);
        let three =
            |value: Option<f64>| value.map_or_else(|| "-".to_string(), |v| format!("{v:.3}"));
        output.text(
            &table.row(&[
                targets[server].label.clone(),
                clients.to_string(),
                workload.name().to_string(),
                goal.baseline.name().to_string(),
                thousands(rate),
                base_rate.map_or_else(|| "-".to_string(), thousands),
                three(ratio),
                goal.min_ratio
                    .map_or_else(|| "-".to_string(), |min| format!("{min:.3}")),
                met.to_string(),
                figures.p50_us.to_string(),
                base.as_ref()
                    .map_or_else(|| "-".to_string(), |base| base.p50_us.to_string()),
                three(p50_ratio),
            ]),
        );
        let mut record = doc! {
            "type": "relative",
            "server": &targets[server].label,
            "uri": &targets[server].display_uri,
            "workload": workload.name(),
            "baseline": goal.baseline.name(),
            "clients": clients as i64,
            "rate_per_sec": rate.round(),
            "verdict": met,
        };
        if let Some(min_ratio) = goal.min_ratio {
            record.insert("min_ratio", min_ratio);
        }
        if workload.reads_preloaded() {
            record.insert("collection_docs", docs as i64);
        }
        if let (Some(base_rate), Some(ratio)) = (base_rate, ratio) {
            record.insert("base_rate_per_sec", base_rate.round());
            record.insert("ratio", (ratio * 1000.0).round() / 1000.0);
        }
        output.json(record);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_name_their_baselines() {
        let range = target_for(Workload::Range10).unwrap();
        assert_eq!(range.baseline, Workload::FindIdEvents);
        assert_eq!(range.min_ratio, Some(0.5));
        assert_eq!(
            target_for(Workload::Or2).unwrap().baseline,
            Workload::FindIdEvents
        );
        assert_eq!(
            target_for(Workload::InsertIndexed).unwrap().baseline,
            Workload::InsertOne
        );
        let txn = target_for(Workload::Txn2Hot).unwrap();
        assert_eq!(txn.baseline, Workload::TwoWritesHot);
        assert_eq!(txn.min_ratio, None);
        assert_eq!(target_for(Workload::FindIdEvents), None);
        assert_eq!(target_for(Workload::FindId), None);
    }

    #[test]
    fn ratios_and_verdicts() {
        assert_eq!(relative(50.0, 100.0), Some(0.5));
        assert_eq!(relative(50.0, 0.0), None);
        assert_eq!(verdict(Some(0.5), Some(0.5)), "met");
        assert_eq!(verdict(Some(0.499), Some(0.5)), "missed");
        assert_eq!(verdict(Some(0.334), Some(1.0 / 3.0)), "met");
        assert_eq!(verdict(Some(0.32), Some(1.0 / 3.0)), "missed");
        assert_eq!(verdict(None, Some(0.5)), "-");
        assert_eq!(verdict(Some(0.4), None), "-");
    }

    #[test]
    fn inserts_compare_documents_per_second() {
        let mut stats = RunStats::empty();
        stats.ops = 10;
        stats.docs = 1000;
        stats.measured = std::time::Duration::from_secs(1);
        let figures = Figures::of(&stats);
        assert!((throughput(Workload::InsertIndexed, &figures) - 1000.0).abs() < 1e-9);
        assert!((throughput(Workload::Range10, &figures) - 10.0).abs() < 1e-9);
    }
}
