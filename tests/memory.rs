//! Memory limits of blocking operations, as mongod's: a blocking `find` sort, an aggregation
//! `$sort`, `$group` and `$bucketAuto` stop at their limit with 292
//! QueryExceededMemoryLimitNoDiskUseAllowed unless disk use is allowed (by the command, or
//! `allowDiskUseByDefault`), and then spill to files under the spill directory and return the
//! same result an unlimited run would; `sort + limit` and `$sample` keep only the top k; `$facet`
//! and `$densify` have their own limits, which do not spill. The limits are lowered here (they
//! are server parameters) so the data stays small; `full_size_sort_and_group_stay_within_memory` (ignored: run it with
//! `cargo test --release --test memory -- --ignored --nocapture`) uses the real 100 MiB limits
//! on the release binary and prints the server's peak RSS.

mod common;

use bson::{doc, Bson, Document};
use common::{command_error, TestServer};
use futures::TryStreamExt;
use mongodb::options::AggregateOptions;
use mongodb::Database;

const LIMIT_BYTES: i64 = 256 * 1024;

/// A server whose blocking operations may hold 256 KiB.
async fn server(extra: &[&str]) -> TestServer {
    let mut set_parameter = vec![
        format!("internalQueryMaxBlockingSortMemoryUsageBytes={LIMIT_BYTES}"),
        format!("internalDocumentSourceGroupMaxMemoryBytes={LIMIT_BYTES}"),
    ];
    set_parameter.extend(extra.iter().map(|parameter| parameter.to_string()));
    TestServer::start_with(tideway::Config {
        set_parameter,
        ..common::test_config()
    })
    .await
}

/// 3,000 documents of about 1 KiB (3 MiB, twelve times the limit), keys in scrambled order.
async fn fill(db: &Database) -> Vec<(i32, i32)> {
    let documents: Vec<Document> = (0..3000)
        .map(|i| doc! {"_id": i, "key": (i * 7919) % 1000, "group": i % 700, "pad": "p".repeat(1000)})
        .collect();
    db.collection::<Document>("big")
        .insert_many(documents)
        .await
        .unwrap();
    let mut expected: Vec<(i32, i32)> = (0..3000).map(|i| ((i * 7919) % 1000, i)).collect();
    // Ties in `key` broken by `_id`, as the sort asks.
    expected.sort();
    expected
}

fn pairs(documents: &[Document]) -> Vec<(i32, i32)> {
    documents
        .iter()
        .map(|document| {
            (
                document.get_i32("key").unwrap(),
                document.get_i32("_id").unwrap(),
            )
        })
        .collect()
}

async fn sorted_find(db: &Database, extra: Document) -> mongodb::error::Result<Vec<Document>> {
    let mut command = doc! {"find": "big", "sort": {"key": 1, "_id": 1}, "projection": {"pad": 0}, "batchSize": 500};
    command.extend(extra);
    let reply = db.run_command(command).await?;
    let cursor = reply.get_document("cursor").unwrap();
    let mut documents: Vec<Document> = cursor
        .get_array("firstBatch")
        .unwrap()
        .iter()
        .map(|document| document.as_document().unwrap().clone())
        .collect();
    let mut id = cursor.get_i64("id").unwrap();
    while id != 0 {
        let more = db
            .run_command(doc! {"getMore": id, "collection": "big", "batchSize": 500})
            .await?;
        let cursor = more.get_document("cursor").unwrap();
        documents.extend(
            cursor
                .get_array("nextBatch")
                .unwrap()
                .iter()
                .map(|document| document.as_document().unwrap().clone()),
        );
        id = cursor.get_i64("id").unwrap();
    }
    Ok(documents)
}

fn spill_files(server: &TestServer) -> usize {
    std::fs::read_dir(&server.state.spill_dir).map_or(0, |entries| entries.count())
}

#[tokio::test]
async fn a_blocking_find_sort_spills_or_fails_with_mongods_error() {
    let server = server(&[]).await;
    let db = server.client().database("mem");
    let expected = fill(&db).await;

    let (code, name, message) = command_error(sorted_find(&db, doc! {"allowDiskUse": false}).await);
    assert_eq!(
        (code, name.as_str()),
        (292, "QueryExceededMemoryLimitNoDiskUseAllowed")
    );
    assert_eq!(
        message,
        format!("Executor error during find command :: caused by :: Sort exceeded memory limit of {LIMIT_BYTES} bytes, but did not opt in to external sorting. Aborting operation. Pass allowDiskUse:true to opt in.")
    );

    let spilled = sorted_find(&db, doc! {"allowDiskUse": true}).await.unwrap();
    assert_eq!(pairs(&spilled), expected);
    // mongod 6.0+ allows disk use by default.
    let by_default = sorted_find(&db, doc! {}).await.unwrap();
    assert_eq!(pairs(&by_default), expected);
    assert_eq!(spill_files(&server), 0, "runs are deleted once read");

    // Top-k holds k documents, not the input: no disk needed.
    let top = sorted_find(&db, doc! {"allowDiskUse": false, "limit": 7, "skip": 3})
        .await
        .unwrap();
    assert_eq!(pairs(&top), expected[3..10].to_vec());
    server.stop().await;
}

#[tokio::test]
async fn allow_disk_use_by_default_false_requires_the_option() {
    let server = server(&["allowDiskUseByDefault=false"]).await;
    let db = server.client().database("mem");
    let expected = fill(&db).await;
    let (code, _, _) = command_error(sorted_find(&db, doc! {}).await);
    assert_eq!(code, 292);
    let spilled = sorted_find(&db, doc! {"allowDiskUse": true}).await.unwrap();
    assert_eq!(pairs(&spilled), expected);
    // The parameter is reported and can be changed at runtime, as in mongod.
    let admin = server.client().database("admin");
    let reply = admin
        .run_command(doc! {"getParameter": 1, "allowDiskUseByDefault": 1})
        .await
        .unwrap();
    assert_eq!(reply.get_bool("allowDiskUseByDefault"), Ok(false));
    admin
        .run_command(doc! {"setParameter": 1, "allowDiskUseByDefault": true})
        .await
        .unwrap();
    assert_eq!(pairs(&sorted_find(&db, doc! {}).await.unwrap()), expected);
    server.stop().await;
}

async fn aggregate(
    db: &Database,
    pipeline: Vec<Document>,
    allow_disk_use: bool,
) -> mongodb::error::Result<Vec<Document>> {
    let options = AggregateOptions::builder()
        .allow_disk_use(allow_disk_use)
        .batch_size(400)
        .build();
    db.collection::<Document>("big")
        .aggregate(pipeline)
        .with_options(options)
        .await?
        .try_collect()
        .await
}

#[tokio::test]
async fn aggregation_sort_and_group_spill_or_fail_with_mongods_error() {
    let server = server(&[]).await;
    let db = server.client().database("mem");
    let expected = fill(&db).await;

    let sort = vec![
        doc! {"$sort": {"key": 1, "_id": 1}},
        doc! {"$project": {"pad": 0}},
    ];
    let (code, _, message) = command_error(aggregate(&db, sort.clone(), false).await);
    assert_eq!(code, 292);
    assert!(
        message.starts_with("PlanExecutor error during aggregation :: caused by :: Sort exceeded memory limit of 262144 bytes"),
        "{message}"
    );
    assert_eq!(pairs(&aggregate(&db, sort, true).await.unwrap()), expected);

    // 700 groups each collecting about 4 KiB: eleven times the group limit.
    let group = vec![
        doc! {"$group": {"_id": "$group", "n": {"$sum": 1}, "pads": {"$push": "$pad"}, "first": {"$first": "$_id"}, "last": {"$last": "$_id"}}},
        doc! {"$project": {"n": 1, "first": 1, "last": 1, "pads": {"$size": "$pads"}}},
        doc! {"$sort": {"_id": 1}},
    ];
    let (code, _, message) = command_error(aggregate(&db, group.clone(), false).await);
    assert_eq!(code, 292);
    assert_eq!(
        message,
        "PlanExecutor error during aggregation :: caused by :: Exceeded memory limit for $group, but didn't allow external sort. Pass allowDiskUse:true to opt in."
    );
    let groups = aggregate(&db, group, true).await.unwrap();
    assert_eq!(groups.len(), 700);
    for (g, document) in groups.iter().enumerate() {
        let g = g as i32;
        // Members are g, g + 700, … below 3000, in insertion (`_id`) order.
        let members: Vec<i32> = (0..3000).filter(|i| i % 700 == g).collect();
        assert_eq!(document.get_i32("_id"), Ok(g));
        assert_eq!(document.get_i32("n"), Ok(members.len() as i32));
        assert_eq!(document.get_i32("pads"), Ok(members.len() as i32));
        assert_eq!(document.get_i32("first"), Ok(members[0]));
        assert_eq!(document.get_i32("last"), Ok(*members.last().unwrap()));
    }
    // `$sort` then `$limit` keeps the top k without disk.
    let top = aggregate(
        &db,
        vec![
            doc! {"$sort": {"key": -1, "_id": 1}},
            doc! {"$limit": 3},
            doc! {"$project": {"key": 1}},
        ],
        false,
    )
    .await
    .unwrap();
    let keys: Vec<Bson> = top.iter().map(|d| d.get("key").unwrap().clone()).collect();
    assert_eq!(keys, vec![Bson::Int32(999); 3]);
    // An output larger than the limit is not a blocking stage: mongod returns it, and so does
    // tideway, without holding it all in memory.
    let everything = aggregate(&db, vec![doc! {"$project": {"pad": 1}}], false)
        .await
        .unwrap();
    assert_eq!(everything.len(), 3000);
    assert_eq!(spill_files(&server), 0);
    server.stop().await;
}

/// `setParameter` on the admin database.
async fn set_parameter(server: &TestServer, name: &str, value: i64) {
    server
        .client()
        .database("admin")
        .run_command(doc! {"setParameter": 1, name: value})
        .await
        .unwrap();
}

/// The manual's `$bucketAuto` `artwork` collection, reduced to `price`.
fn artwork_prices() -> Vec<Document> {
    [
        "199.99", "280.00", "76.04", "167.30", "483.00", "385.00", "159.00", "118.42",
    ]
    .iter()
    .enumerate()
    .map(|(i, price)| doc! {"_id": i as i32 + 1, "price": Bson::Decimal128(price.parse().unwrap())})
    .collect()
}

fn dec(text: &str) -> Bson {
    Bson::Decimal128(text.parse().unwrap())
}

#[tokio::test]
async fn bucket_auto_sample_facet_and_densify_hold_mongods_limits() {
    let server = server(&[&format!(
        "internalDocumentSourceBucketAutoMaxMemoryBytes={LIMIT_BYTES}"
    )])
    .await;
    let db = server.client().database("mem");
    fill(&db).await;
    let admin = server.client().database("admin");
    let reply = admin
        .run_command(doc! {"getParameter": 1, "internalDocumentSourceBucketAutoMaxMemoryBytes": 1, "internalDocumentSourceDensifyMaxMemoryBytes": 1, "internalQueryFacetBufferSizeBytes": 1, "internalQueryFacetMaxOutputDocSizeBytes": 1})
        .await
        .unwrap();
    assert_eq!(
        reply.get_i64("internalDocumentSourceBucketAutoMaxMemoryBytes"),
        Ok(LIMIT_BYTES)
    );
    for default in [
        "internalDocumentSourceDensifyMaxMemoryBytes",
        "internalQueryFacetBufferSizeBytes",
        "internalQueryFacetMaxOutputDocSizeBytes",
    ] {
        assert_eq!(reply.get_i64(default), Ok(100 * 1024 * 1024), "{default}");
    }

    // $bucketAuto sorts 3 MiB by `key` (each of 0..1000 three times) in its own sorter.
    let buckets = vec![doc! {"$bucketAuto": {"groupBy": "$key", "buckets": 10}}];
    let (code, _, message) = command_error(aggregate(&db, buckets.clone(), false).await);
    assert_eq!(code, 292);
    assert_eq!(
        message,
        format!("PlanExecutor error during aggregation :: caused by :: Sort exceeded memory limit of {LIMIT_BYTES} bytes, but did not opt in to external sorting.")
    );
    // 300 documents (100 keys) a bucket; each maximum is the next minimum, the last inclusive.
    let expected: Vec<Document> = (0..10)
        .map(|b| doc! {"_id": {"min": b * 100, "max": if b == 9 { 999 } else { b * 100 + 100 }}, "count": 300})
        .collect();
    assert_eq!(aggregate(&db, buckets, true).await.unwrap(), expected);
    // The manual's price example, spilling every document.
    set_parameter(
        &server,
        "internalDocumentSourceBucketAutoMaxMemoryBytes",
        100,
    )
    .await;
    db.collection::<Document>("artwork")
        .insert_many(artwork_prices())
        .await
        .unwrap();
    let options = AggregateOptions::builder().allow_disk_use(true).build();
    let prices: Vec<Document> = db
        .collection::<Document>("artwork")
        .aggregate(vec![
            doc! {"$bucketAuto": {"groupBy": "$price", "buckets": 4}},
        ])
        .with_options(options)
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap();
    assert_eq!(
        prices,
        vec![
            doc! {"_id": {"min": dec("76.04"), "max": dec("159.00")}, "count": 2},
            doc! {"_id": {"min": dec("159.00"), "max": dec("199.99")}, "count": 2},
            doc! {"_id": {"min": dec("199.99"), "max": dec("385.00")}, "count": 2},
            doc! {"_id": {"min": dec("385.00"), "max": dec("483.00")}, "count": 2},
        ]
    );

    // $sample holds its size, not its input: no disk needed.
    let sample = aggregate(
        &db,
        vec![doc! {"$sample": {"size": 5}}, doc! {"$project": {"pad": 0}}],
        false,
    )
    .await
    .unwrap();
    let mut ids: Vec<i32> = sample.iter().map(|d| d.get_i32("_id").unwrap()).collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), 5);

    // $facet reads its input in batches and never refuses it; its branches keep their limits.
    set_parameter(&server, "internalQueryFacetBufferSizeBytes", LIMIT_BYTES).await;
    let facet = vec![doc! {"$facet": {
        "n": [{"$count": "n"}],
        "top": [{"$sort": {"key": -1, "_id": 1}}, {"$limit": 2}, {"$project": {"_id": 1}}],
    }}];
    let mut highest: Vec<i32> = (0..3000).filter(|i| (i * 7919) % 1000 == 999).collect();
    highest.truncate(2);
    assert_eq!(
        aggregate(&db, facet, false).await.unwrap(),
        vec![
            doc! {"n": [{"n": 3000}], "top": highest.iter().map(|id| doc! {"_id": *id}).collect::<Vec<_>>()}
        ]
    );
    // The document it builds may hold internalQueryFacetMaxOutputDocSizeBytes, disk or not.
    set_parameter(
        &server,
        "internalQueryFacetMaxOutputDocSizeBytes",
        LIMIT_BYTES,
    )
    .await;
    let (code, name, message) = command_error(
        aggregate(
            &db,
            vec![doc! {"$facet": {"all": [{"$project": {"pad": 1}}]}}],
            true,
        )
        .await,
    );
    assert_eq!((code, name.as_str()), (4031700, "Location4031700"));
    // (Only 292 carries the "PlanExecutor error during aggregation" context here.)
    assert!(
        message.starts_with("document constructed by $facet is ")
            && message.ends_with(&format!(
                " bytes, which exceeds the limit of {LIMIT_BYTES} bytes"
            )),
        "{message}"
    );

    // $densify's partitions (jstests/aggregation/sources/densify/memory_limit.js).
    set_parameter(&server, "internalDocumentSourceDensifyMaxMemoryBytes", 1000).await;
    let long = ",".repeat(100);
    let parts = db.collection::<Document>("parts");
    parts
        .insert_many((0..10).map(|i| doc! {"_id": i, "val": i, "part": format!("{long}{i}")}))
        .await
        .unwrap();
    let (code, _, message) = command_error(
        db.run_command(doc! {"aggregate": "parts", "pipeline": [{"$densify": {"field": "val", "partitionByFields": ["part"], "range": {"step": 1, "bounds": "partition"}}}], "cursor": {}})
            .await,
    );
    assert_eq!(code, 6007200);
    assert_eq!(message, "$densify exceeded memory limit of 1000");
    assert_eq!(spill_files(&server), 0);
    server.stop().await;
}

#[tokio::test]
async fn max_time_ms_interrupts_a_blocking_sort() {
    let server = server(&[]).await;
    let db = server.client().database("mem");
    fill(&db).await;
    let (code, _, _) = command_error(
        db.run_command(doc! {"find": "big", "sort": {"pad": 1, "key": -1}, "allowDiskUse": true, "maxTimeMS": 1})
            .await,
    );
    assert_eq!(code, 50);
    let (code, _, _) = command_error(
        db.run_command(doc! {"aggregate": "big", "pipeline": [{"$group": {"_id": "$key", "p": {"$push": "$pad"}}}], "cursor": {}, "allowDiskUse": true, "maxTimeMS": 1})
            .await,
    );
    assert_eq!(code, 50);
    // Nothing is left behind, and the server serves on.
    assert_eq!(spill_files(&server), 0);
    db.run_command(doc! {"ping": 1}).await.unwrap();
    server.stop().await;
}

/// A memory figure of a process from `/proc/<pid>/status`, in KiB (`VmHWM` peak, `VmRSS` now).
fn status_kib(pid: u32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|line| line.strip_prefix(field))
        .and_then(|value| {
            value
                .trim()
                .trim_start_matches(':')
                .trim()
                .trim_end_matches(" kB")
                .parse()
                .ok()
        })
        .unwrap_or(0)
}

fn memory_line(pid: u32) -> String {
    format!(
        "server RSS {} KiB, peak {} KiB",
        status_kib(pid, "VmRSS"),
        status_kib(pid, "VmHWM")
    )
}

#[tokio::test]
#[ignore = "300 MiB of data (TIDEWAY_MEMORY_TEST_BATCHES × 3 MiB): run in release with --ignored"]
async fn full_size_sort_and_group_stay_within_memory() {
    let batches: i32 = std::env::var("TIDEWAY_MEMORY_TEST_BATCHES")
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(100);
    let documents = batches * 1000;
    let dir = tempfile::tempdir().unwrap();
    let server = common::process::Process::start_disk(dir.path(), &[]);
    let db = server.client().database("mem");
    let coll = db.collection::<Document>("big");
    let pad = "q".repeat(3000);
    for batch in 0..batches {
        let documents: Vec<Document> = (0..1000)
            .map(|i| {
                let n = batch * 1000 + i;
                doc! {"_id": n, "key": (n * 7919) % 100_003, "group": n % (documents / 2), "pad": &pad}
            })
            .collect();
        coll.insert_many(documents).await.unwrap();
    }
    let pid = server.pid();
    println!(
        "{documents} documents of 3 KiB loaded; {}",
        memory_line(pid)
    );

    let started = std::time::Instant::now();
    let (code, _, _) = command_error(
        db.run_command(doc! {"find": "big", "sort": {"key": 1}, "allowDiskUse": false})
            .await,
    );
    assert_eq!(code, 292);
    let mut cursor = coll
        .find(doc! {})
        .sort(doc! {"key": 1})
        .allow_disk_use(true)
        .projection(doc! {"key": 1})
        .await
        .unwrap();
    let mut previous = i32::MIN;
    let mut seen = 0;
    while let Some(document) = cursor.try_next().await.unwrap() {
        let key = document.get_i32("key").unwrap();
        assert!(key >= previous);
        previous = key;
        seen += 1;
    }
    assert_eq!(seen, documents);
    println!(
        "sorted them with allowDiskUse in {:?}; {}",
        started.elapsed(),
        memory_line(pid)
    );

    let started = std::time::Instant::now();
    let pipeline = vec![
        doc! {"$group": {"_id": "$group", "n": {"$sum": 1}, "pads": {"$push": "$pad"}}},
        doc! {"$project": {"n": 1}},
    ];
    let (code, _, _) = command_error(aggregate(&db, pipeline.clone(), false).await);
    assert_eq!(code, 292);
    let groups = aggregate(&db, pipeline, true).await.unwrap();
    assert_eq!(groups.len() as i32, documents / 2);
    assert!(groups.iter().all(|group| group.get_i32("n") == Ok(2)));
    println!(
        "grouped them into {} groups of 2 with allowDiskUse in {:?}; {}",
        documents / 2,
        started.elapsed(),
        memory_line(pid)
    );
    server.terminate();
}
