//! `--latency-vs-size`: find-by-`_id` latency as one collection grows through `--sizes`
//! (default 10k, 100k, 1M documents), for each `--clients` count (default 1 and 8).
//!
//! For each size, every server's `scaling` collection is grown to that size (the documents
//! already there stay; ids go on from where they stopped), then the `find_id` workload runs
//! with ids drawn from the whole collection. At the end, the p50 and p99 at the largest size
//! are divided by those at the smallest: "flat" means a ratio near 1.

use std::collections::BTreeMap;

use bson::doc;

use crate::report::{print_errors, thousands, Column, Figures, Table};
use crate::runner::{self, RunStats};
use crate::target::{label_width, Target};
use crate::workload::{OpParams, Workload};
use crate::{dataset, ratio, Settings};

/// Collection grown through the sizes (dropped when the mode starts).
pub const SCALING_COLLECTION: &str = "scaling";

/// Runs the mode; setup failures are added to `problems` and skip that server.
pub async fn run(
    targets: &[Target],
    sizes: &[u64],
    settings: &Settings,
    problems: &mut Vec<String>,
) {
    let output = settings.output;
    let label_width = label_width(targets);
    output.text("");
    output.text(&format!(
        "latency vs collection size: find_id over a collection grown through {sizes:?} docs; {}",
        settings.describe_timing()
    ));
    let table = Table::new(vec![
        Column::text("server", label_width),
        Column::number("coll_docs", 9),
        Column::number("clients", 7),
        Column::number("round", 5),
        Column::number("secs", 5),
        Column::number("ops/s", 10),
        Column::number("p50_us", 8),
        Column::number("p99_us", 8),
        Column::number("p99.9_us", 8),
        Column::number("errors", 6),
    ]);

    // Per server: documents loaded so far, or None once its setup failed.
    let mut loaded: Vec<Option<u64>> = Vec::with_capacity(targets.len());
    for target in targets {
        let collection = target.collection(SCALING_COLLECTION);
        match dataset::drop(&collection).await {
            Ok(()) => loaded.push(Some(0)),
            Err(error) => {
                problems.push(format!(
                    "{}: dropping {SCALING_COLLECTION} failed: {}",
                    target.label, error.message
                ));
                loaded.push(None);
            }
        }
    }

    // (server, size, clients) → runs.
    let mut results: BTreeMap<(usize, u64, usize), Vec<RunStats>> = BTreeMap::new();
    let mut header_printed = false;
    for &size in sizes {
        for (index, target) in targets.iter().enumerate() {
            let Some(from) = loaded[index] else { continue };
            eprintln!(
                "growing {SCALING_COLLECTION} on {} to {size} docs",
                target.label
            );
            let collection = target.collection(SCALING_COLLECTION);
            match dataset::grow(&collection, from, size, settings.doc_bytes, settings.seed).await {
                Ok(()) => loaded[index] = Some(size),
                Err(error) => {
                    problems.push(format!(
                        "{}: growing {SCALING_COLLECTION} to {size} failed: {}",
                        target.label, error.message
                    ));
                    loaded[index] = None;
                }
            }
        }
        let params = OpParams {
            doc_bytes: settings.doc_bytes,
            batch_size: 1,
            id_bound: size,
        };
        for &clients in &settings.clients {
            for round in 0..settings.rounds {
                for (index, target) in targets.iter().enumerate() {
                    if loaded[index].is_none() {
                        continue;
                    }
                    eprintln!(
                        "running find_id on {size} docs clients={clients} round={} on {}",
                        round + 1,
                        target.label
                    );
                    let collection = target.collection(SCALING_COLLECTION);
                    let config = settings.run_config(clients, round);
                    let stats = runner::run(Workload::FindId, &collection, params, config).await;
                    if !header_printed {
                        output.text(&table.header());
                        header_printed = true;
                    }
                    let figures = Figures::of(&stats);
                    output.text(&table.row(&[
                        target.label.clone(),
                        size.to_string(),
                        clients.to_string(),
                        (round + 1).to_string(),
                        format!("{:.1}", figures.seconds),
                        thousands(figures.ops_per_sec),
                        figures.p50_us.to_string(),
                        figures.p99_us.to_string(),
                        figures.p999_us.to_string(),
                        figures.errors.to_string(),
                    ]));
                    let mut record = doc! {
                        "type": "scaling_run",
                        "server": &target.label,
                        "uri": &target.display_uri,
                        "workload": "find_id",
                        "collection_docs": size as i64,
                        "clients": clients as i64,
                        "round": (round + 1) as i64,
                        "duration_secs": settings.duration.as_secs_f64(),
                        "warmup_secs": settings.warmup.as_secs_f64(),
                        "doc_bytes": settings.doc_bytes as i64,
                    };
                    figures.append_to(&mut record);
                    output.json(record);
                    print_errors(
                        &format!("{} find_id {size} docs clients={clients}", target.label),
                        &stats,
                    );
                    results
                        .entry((index, size, clients))
                        .or_default()
                        .push(stats);
                }
            }
        }
    }
    print_flatness(targets, sizes, settings, &results);
}

/// Largest-size latency over smallest-size latency, per server and client count.
fn print_flatness(
    targets: &[Target],
    sizes: &[u64],
    settings: &Settings,
    results: &BTreeMap<(usize, u64, usize), Vec<RunStats>>,
) {
    let (Some(&smallest), Some(&largest)) = (sizes.first(), sizes.last()) else {
        return;
    };
    let output = settings.output;
    let label_width = label_width(targets);
    let table = Table::new(vec![
        Column::text("server", label_width),
        Column::number("clients", 7),
        Column::number("p50_small", 9),
        Column::number("p50_large", 9),
        Column::number("p50_ratio", 9),
        Column::number("p99_small", 9),
        Column::number("p99_large", 9),
        Column::number("p99_ratio", 9),
    ]);
    output.text("");
    output.text(&format!(
        "flatness: latency at {largest} docs ÷ latency at {smallest} docs (rounds merged; \
         target p50 ratio ≤ 1.5)"
    ));
    output.text(&table.header());
    for (index, target) in targets.iter().enumerate() {
        for &clients in &settings.clients {
            let merged = |size: u64| {
                results
                    .get(&(index, size, clients))
                    .map(|runs| Figures::of(&RunStats::merged(runs)))
            };
            let (Some(small), Some(large)) = (merged(smallest), merged(largest)) else {
                continue;
            };
            let p50_ratio = ratio(large.p50_us as f64, small.p50_us as f64);
            let p99_ratio = ratio(large.p99_us as f64, small.p99_us as f64);
            output.text(&table.row(&[
                target.label.clone(),
                clients.to_string(),
                small.p50_us.to_string(),
                large.p50_us.to_string(),
                p50_ratio.clone(),
                small.p99_us.to_string(),
                large.p99_us.to_string(),
                p99_ratio.clone(),
            ]));
            output.json(doc! {
                "type": "scaling_flatness",
                "server": &target.label,
                "uri": &target.display_uri,
                "clients": clients as i64,
                "smallest_docs": smallest as i64,
                "largest_docs": largest as i64,
                "p50_small_us": small.p50_us as i64,
                "p50_large_us": large.p50_us as i64,
                "p50_ratio": p50_ratio.parse::<f64>().unwrap_or(f64::NAN),
                "p99_small_us": small.p99_us as i64,
                "p99_large_us": large.p99_us as i64,
                "p99_ratio": p99_ratio.parse::<f64>().unwrap_or(f64::NAN),
            });
        }
    }
}
