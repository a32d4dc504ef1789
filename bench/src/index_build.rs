//! `--index-build`: how long a server takes to build one index on a loaded collection.
//!
//! Per server, `index_build` is loaded with `--docs` small documents `{_id: i, a: <random
//! int32>, b: <random 8 letters>}` and no secondary index (reused when its count already
//! matches, unless `--reload`), then, `--rounds` times: drop `{a: 1}` if it exists and time one
//! `createIndexes` of `{a: 1}`, from sending it to its reply. Issue 9's target is under 10 s for
//! 1,000,000 documents; other sizes are reported without a verdict.

use std::time::{Duration, Instant};

use bson::{doc, Document};
use mongodb::{Collection, IndexModel};

use crate::dataset;
use crate::report::{thousands, Column, Output, Table};
use crate::rng::SplitMix64;
use crate::target::{label_width, Target};
use crate::workload::{random_payload, OpError};

/// Collection loaded and indexed by the mode.
pub const INDEX_BUILD_COLLECTION: &str = "index_build";
/// Name of the `{a: 1}` index.
const INDEX_NAME: &str = "a_1";
/// The target applies to this many documents...
pub const TARGET_DOCS: u64 = 1_000_000;
/// ...and is a build shorter than this.
pub const TARGET_SECS: f64 = 10.0;

/// What the mode needs from the command line.
#[derive(Clone, Copy, Debug)]
pub struct IndexBuildSettings {
    pub docs: u64,
    pub rounds: usize,
    pub reload: bool,
    pub seed: u64,
    pub output: Output,
}

/// Document `id`: `{_id, a, b}`, about 40 bytes of BSON.
pub fn small_document(id: u64, rng: &mut SplitMix64) -> Document {
    doc! {
        "_id": id as i64,
        "a": rng.next_u64() as i32,
        "b": random_payload(rng, 8),
    }
}

/// "met" / "missed" against the target, or "-" when `docs` is not the target's size.
pub fn verdict(docs: u64, build: Duration) -> &'static str {
    if docs != TARGET_DOCS {
        "-"
    } else if build.as_secs_f64() < TARGET_SECS {
        "met"
    } else {
        "missed"
    }
}

/// Runs the mode against every server; failures are added to `problems`.
pub async fn run(targets: &[Target], settings: IndexBuildSettings, problems: &mut Vec<String>) {
    let output = settings.output;
    output.text(&format!(
        "index build: {} docs {{_id, a: int32, b: 8 letters}} loaded without secondary indexes, \
         then createIndexes {{a: 1}} timed from request to reply; {} round(s); target < {TARGET_SECS} s \
         at {} docs",
        thousands(settings.docs as f64),
        settings.rounds,
        thousands(TARGET_DOCS as f64)
    ));
    let table = Table::new(vec![
        Column::text("server", label_width(targets)),
        Column::number("docs", 9),
        Column::number("round", 5),
        Column::number("load_s", 7),
        Column::number("build_s", 8),
        Column::number("docs/s", 10),
        Column::text("target", 6),
    ]);
    let mut header_printed = false;
    for target in targets {
        let collection = target.collection(INDEX_BUILD_COLLECTION);
        eprintln!(
            "preparing {}.{INDEX_BUILD_COLLECTION} on {} ({} docs)",
            target.database_name(),
            target.label,
            settings.docs
        );
        let load = match prepare(&collection, settings).await {
            Ok(load) => load,
            Err(error) => {
                problems.push(format!(
                    "{}: loading {INDEX_BUILD_COLLECTION} failed: {}",
                    target.label, error.message
                ));
                continue;
            }
        };
        for round in 0..settings.rounds {
            let built = time_build(&collection).await;
            let build = match built {
                Ok(build) => build,
                Err(error) => {
                    problems.push(format!(
                        "{}: building {INDEX_NAME} failed: {}",
                        target.label, error.message
                    ));
                    break;
                }
            };
            if !header_printed {
                output.text(&table.header());
                header_printed = true;
            }
            let seconds = build.as_secs_f64();
            let rate = settings.docs as f64 / seconds.max(1e-9);
            let met = verdict(settings.docs, build);
            output.text(&table.row(&[
                target.label.clone(),
                settings.docs.to_string(),
                (round + 1).to_string(),
                match (round, load) {
                    (0, Some(load)) => format!("{:.1}", load.as_secs_f64()),
                    (0, None) => "reused".to_string(),
                    _ => "-".to_string(),
                },
                format!("{seconds:.3}"),
                thousands(rate),
                met.to_string(),
            ]));
            let mut record = doc! {
                "type": "index_build",
                "server": &target.label,
                "uri": &target.display_uri,
                "collection_docs": settings.docs as i64,
                "round": (round + 1) as i64,
                "build_secs": (seconds * 1000.0).round() / 1000.0,
                "docs_per_sec": rate.round(),
                "target": met,
            };
            if let (0, Some(load)) = (round, load) {
                record.insert("load_secs", (load.as_secs_f64() * 1000.0).round() / 1000.0);
            }
            output.json(record);
        }
    }
}

/// Loads the collection unless it can be reused; returns the load time (`None`: reused).
async fn prepare(
    collection: &Collection<Document>,
    settings: IndexBuildSettings,
) -> Result<Option<Duration>, OpError> {
    if !settings.reload && dataset::count(collection).await.ok() == Some(settings.docs) {
        eprintln!("  reusing the existing {} documents", settings.docs);
        return Ok(None);
    }
    dataset::drop(collection).await?;
    let started = Instant::now();
    dataset::grow_docs(collection, 0, settings.docs, settings.seed, small_document).await?;
    Ok(Some(started.elapsed()))
}

/// Drops `{a: 1}` if it is there, then times building it.
async fn time_build(collection: &Collection<Document>) -> Result<Duration, OpError> {
    let existing = collection.list_index_names().await?;
    if existing.iter().any(|name| name == INDEX_NAME) {
        collection.drop_index(INDEX_NAME).await?;
    }
    let model = IndexModel::builder().keys(doc! {"a": 1}).build();
    let started = Instant::now();
    collection.create_index(model).await?;
    Ok(started.elapsed())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_documents_are_small() {
        let mut rng = SplitMix64::new(1, 0);
        let document = small_document(999_999, &mut rng);
        assert_eq!(document.get_i64("_id").unwrap(), 999_999);
        assert!(document.get_i32("a").is_ok());
        assert_eq!(document.get_str("b").unwrap().len(), 8);
        assert!(bson::to_vec(&document).unwrap().len() < 48);
    }

    #[test]
    fn the_verdict_applies_only_at_the_target_size() {
        assert_eq!(verdict(TARGET_DOCS, Duration::from_secs_f64(9.9)), "met");
        assert_eq!(verdict(TARGET_DOCS, Duration::from_secs(10)), "missed");
        assert_eq!(verdict(20_000, Duration::from_secs(60)), "-");
    }
}
