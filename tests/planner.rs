//! The query planner: an index plan returns exactly what a collection scan returns (a corpus of
//! generated filters over mixed-type, array and null data, with every index hinted, the
//! planner's own choice and `$natural`), and `explain` reports the plan that runs with measured
//! counters for every plan kind (mongod's stage names and shapes).

mod common;

use bson::{doc, Bson, Document};
use common::{Rng, TestServer};
use futures::TryStreamExt;
use mongodb::{Collection, Database};

fn scalars() -> Vec<Bson> {
    vec![
        Bson::Int32(-2),
        Bson::Int32(0),
        Bson::Int32(1),
        Bson::Int64(3),
        Bson::Double(3.0),
        Bson::Double(4.5),
        Bson::Double(-0.0),
        Bson::Double(f64::NAN),
        Bson::Int32(7),
        Bson::Int32(10),
        Bson::String("a".into()),
        Bson::String("ab".into()),
        Bson::String("abc".into()),
        Bson::String("b".into()),
        Bson::Null,
        Bson::Boolean(true),
        Bson::Boolean(false),
        Bson::DateTime(bson::DateTime::from_millis(1_000)),
        Bson::DateTime(bson::DateTime::from_millis(5_000)),
        Bson::Document(doc! {"x": 1}),
    ]
}

fn value(rng: &mut Rng, arrays: bool) -> Option<Bson> {
    match rng.below(12) {
        0 => None,
        1 if arrays => Some(Bson::Array(vec![
            rng.pick(&scalars()),
            rng.pick(&scalars()),
        ])),
        2 if arrays => Some(Bson::Array(Vec::new())),
        3 if arrays => Some(Bson::Array(vec![Bson::Array(vec![Bson::Int32(1)])])),
        _ => Some(rng.pick(&scalars())),
    }
}

fn documents(rng: &mut Rng, arrays: bool) -> Vec<Document> {
    (0..300)
        .map(|id| {
            let mut document = doc! {"_id": id};
            // Compound indexes cover a and b: at most one of them may hold an array.
            let array_field = rng.pick(&["a", "b"]);
            for field in ["a", "b", "e"] {
                if let Some(value) = value(rng, arrays && field == array_field) {
                    document.insert(field, value);
                }
            }
            let c = match (rng.below(4), arrays) {
                (0, _) => None,
                (1, true) => Some(Bson::Array(vec![
                    Bson::Document(doc! {"d": rng.pick(&scalars())}),
                    Bson::Document(doc! {"d": rng.pick(&scalars())}),
                ])),
                (2, true) => Some(Bson::Array(vec![Bson::Int32(1)])),
                _ => value(rng, false).map(|d| Bson::Document(doc! {"d": d})),
            };
            if let Some(c) = c {
                document.insert("c", c);
            }
            document
        })
        .collect()
}

fn operand(rng: &mut Rng) -> Bson {
    rng.pick(&scalars())
}

fn leaf(rng: &mut Rng) -> Document {
    let field = rng.pick(&["a", "b", "c.d", "_id", "e"]);
    let condition: Bson = match rng.below(16) {
        0 => operand(rng),
        1 => doc! {"$gt": operand(rng)}.into(),
        2 => doc! {"$gte": operand(rng), "$lt": operand(rng)}.into(),
        3 => doc! {"$lte": operand(rng)}.into(),
        4 => doc! {"$in": [operand(rng), operand(rng), operand(rng)]}.into(),
        5 => doc! {"$nin": [operand(rng), operand(rng)]}.into(),
        6 => doc! {"$ne": operand(rng)}.into(),
        7 => doc! {"$exists": rng.below(2) == 0}.into(),
        8 => {
            doc! {"$type": rng.pick(&["number", "string", "null", "date", "object", "bool"])}.into()
        }
        9 => doc! {"$regex": rng.pick(&["^a", "^ab", "b", "^a.c", "^A"])}.into(),
        10 => Bson::Null,
        11 => doc! {"$elemMatch": {"$gte": 1, "$lt": 8}}.into(),
        12 => doc! {"$not": {"$gt": operand(rng)}}.into(),
        13 => doc! {"$gt": rng.below(8) as i32, "$lt": (rng.below(8) + 2) as i32}.into(),
        14 => doc! {"$in": [Bson::Null, operand(rng)]}.into(),
        _ => doc! {"$gte": operand(rng)}.into(),
    };
    doc! {field: condition}
}

fn filter(rng: &mut Rng) -> Document {
    match rng.below(6) {
        0 => doc! {"$or": [leaf(rng), leaf(rng)]},
        1 => {
            let mut both = leaf(rng);
            both.extend(leaf(rng));
            both
        }
        2 => doc! {"$and": [leaf(rng), {"$or": [leaf(rng), leaf(rng)]}]},
        _ => leaf(rng),
    }
}

async fn ids(
    collection: &Collection<Document>,
    filter: &Document,
    hint: Option<Bson>,
    sort: Option<Document>,
) -> Result<Vec<Bson>, String> {
    let mut find = collection.find(filter.clone());
    if let Some(hint) = hint {
        find = find.hint(mongodb::options::Hint::Keys(match hint {
            Bson::Document(keys) => keys,
            _ => unreachable!(),
        }));
    }
    if let Some(sort) = sort {
        find = find.sort(sort);
    }
    let documents: Vec<Document> = find
        .await
        .map_err(|error| error.to_string())?
        .try_collect()
        .await
        .map_err(|error| error.to_string())?;
    Ok(documents
        .into_iter()
        .map(|document| document.get("_id").cloned().unwrap_or(Bson::Null))
        .collect())
}

/// The encoded documents `filter` finds under `projection` and `hint`, in byte order (so equal
/// values of different BSON types stay apart).
async fn projected(
    collection: &Collection<Document>,
    filter: &Document,
    projection: &Document,
    hint: Document,
) -> Result<Vec<Vec<u8>>, String> {
    let documents: Vec<Document> = collection
        .find(filter.clone())
        .projection(projection.clone())
        .hint(mongodb::options::Hint::Keys(hint))
        .await
        .map_err(|error| error.to_string())?
        .try_collect()
        .await
        .map_err(|error| error.to_string())?;
    let mut encoded: Vec<Vec<u8>> = documents
        .iter()
        .map(|document| bson::to_vec(document).unwrap())
        .collect();
    encoded.sort();
    Ok(encoded)
}

fn sorted(mut ids: Vec<Bson>) -> Vec<i32> {
    let mut out: Vec<i32> = ids.drain(..).map(|id| id.as_i32().unwrap_or(-1)).collect();
    out.sort_unstable();
    out
}

/// The ordered indexes both collections get (a sparse index on `e` comes on top).
fn indexes() -> Vec<(&'static str, Document)> {
    vec![
        ("a_1", doc! {"a": 1}),
        ("b_-1", doc! {"b": -1}),
        ("a_1_b_1", doc! {"a": 1, "b": 1}),
        ("b_1_a_-1", doc! {"b": 1, "a": -1}),
        ("c.d_1", doc! {"c.d": 1}),
        ("e_1_a_1_b_1", doc! {"e": 1, "a": 1, "b": 1}),
        ("e_hashed", doc! {"e": "hashed"}),
        ("$**_1", doc! {"$**": 1}),
    ]
}

async fn load(db: &Database, name: &str, arrays: bool, seed: u64) -> Collection<Document> {
    let collection = db.collection::<Document>(name);
    collection
        .insert_many(documents(&mut Rng(seed), arrays))
        .await
        .unwrap();
    let mut indexes: Vec<Bson> = indexes()
        .into_iter()
        .map(|(name, key)| Bson::Document(doc! {"key": key, "name": name}))
        .collect();
    indexes.push(Bson::Document(
        doc! {"key": {"e": 1}, "name": "e_sparse", "sparse": true},
    ));
    db.run_command(doc! {"createIndexes": name, "indexes": indexes})
        .await
        .unwrap();
    collection
}

#[tokio::test]
async fn every_index_plan_returns_what_a_collection_scan_returns() {
    let server = TestServer::start().await;
    let db = server.client().database("planner");
    let flat = load(&db, "flat", false, 7).await;
    let mixed = load(&db, "mixed", true, 11).await;
    // Longer runs: TIDEWAY_PLANNER_SEED=<n> TIDEWAY_PLANNER_FILTERS=<n> cargo test --test planner.
    let env_number = |name: &str| {
        std::env::var(name)
            .ok()
            .and_then(|value| value.parse::<u64>().ok())
    };
    let mut rng = Rng(env_number("TIDEWAY_PLANNER_SEED").unwrap_or(0x5eed_1234) | 1);
    let rounds = env_number("TIDEWAY_PLANNER_FILTERS").unwrap_or(240);
    let mut checked = 0;
    for round in 0..rounds {
        let collection = if round % 2 == 0 { &flat } else { &mixed };
        let filter = filter(&mut rng);
        let reference =
            match ids(collection, &filter, Some(doc! {"$natural": 1}.into()), None).await {
                Ok(reference) => sorted(reference),
                // Filters mongod refuses are refused whatever the plan.
                Err(_) => continue,
            };
        checked += 1;
        let chosen = sorted(ids(collection, &filter, None, None).await.unwrap());
        assert_eq!(
            chosen,
            reference,
            "planner's choice for {filter} on {}",
            collection.name()
        );
        for (name, key) in indexes() {
            let hinted = sorted(
                ids(collection, &filter, Some(key.into()), None)
                    .await
                    .unwrap(),
            );
            assert_eq!(
                hinted,
                reference,
                "hint {name} for {filter} on {}",
                collection.name()
            );
        }
        // Counts, from index keys where the plan allows it, count what a scan finds.
        let counted = collection.count_documents(filter.clone()).await.unwrap();
        assert_eq!(
            counted as usize,
            reference.len(),
            "countDocuments({filter}) on {}",
            collection.name()
        );
        let reply = collection
            .client()
            .database("planner")
            .run_command(doc! {"count": collection.name(), "query": filter.clone()})
            .await
            .unwrap();
        assert_eq!(
            reply.get_i32("n").unwrap() as usize,
            reference.len(),
            "count {filter}"
        );
        // Distinct values, through an index where one answers them, as a scan finds them.
        for key in ["a", "b"] {
            for query in [filter.clone(), doc! {}, doc! {key: {"$gte": 1}}] {
                let distinct = |hint: Option<Document>| {
                    let mut command =
                        doc! {"distinct": collection.name(), "key": key, "query": query.clone()};
                    if let Some(hint) = hint {
                        command.insert("hint", hint);
                    }
                    let db = collection.client().database("planner");
                    async move {
                        db.run_command(command)
                            .await
                            .map(|reply| reply.get_array("values").unwrap().clone())
                    }
                };
                let Ok(reference) = distinct(Some(doc! {"$natural": 1})).await else {
                    continue;
                };
                // Equal values of different types (0 and -0.0) may be represented by either.
                let values = distinct(None).await.unwrap();
                assert!(
                    values.len() == reference.len()
                        && values
                            .iter()
                            .zip(&reference)
                            .all(|(a, b)| tideway_query::values_equal(a, b)),
                    "distinct {key} {query}: {values:?} vs {reference:?}"
                );
            }
        }
        // Covered reads (projections of index fields, answered from keys with each value's own
        // BSON type) return what a scan projects, byte for byte. Only the non-multikey
        // collection has coverable indexes.
        if collection.name() == "flat" {
            for (projection, hint) in [
                (doc! {"a": 1, "_id": 0}, doc! {"a": 1}),
                (doc! {"a": 1, "b": 1, "_id": 0}, doc! {"a": 1, "b": 1}),
                (doc! {"b": 1, "_id": 0}, doc! {"b": -1}),
            ] {
                let reference = projected(collection, &filter, &projection, doc! {"$natural": 1})
                    .await
                    .unwrap();
                let covered = projected(collection, &filter, &projection, hint.clone())
                    .await
                    .unwrap();
                assert_eq!(
                    covered, reference,
                    "projection {projection} hinted {hint} for {filter}"
                );
            }
        }
        // Sorted reads: the same documents in an order consistent with the sort.
        let sort = doc! {rng.pick(&["a", "b"]): rng.pick(&[1, -1])};
        let by_sort = ids(collection, &filter, None, Some(sort.clone()))
            .await
            .unwrap();
        assert_eq!(sorted(by_sort), reference, "sorted {sort} for {filter}");
    }
    assert!(
        checked >= rounds.min(200),
        "only {checked} of {rounds} filters were checked"
    );
}

async fn explain(db: &Database, command: Document, verbosity: &str) -> Document {
    db.run_command(doc! {"explain": command, "verbosity": verbosity})
        .await
        .unwrap()
}

fn stage<'a>(plan: &'a Document, path: &[&str]) -> &'a Document {
    let mut current = plan;
    for step in path {
        current = current.get_document(step).unwrap();
    }
    current
}

/// `(nReturned, totalKeysExamined, totalDocsExamined)` of an explain's `executionStats`.
fn counters(reply: &Document) -> (i32, i32, i32) {
    let stats = reply.get_document("executionStats").unwrap();
    let counter = |name: &str| stats.get_i32(name).unwrap();
    (
        counter("nReturned"),
        counter("totalKeysExamined"),
        counter("totalDocsExamined"),
    )
}

async fn events(server: &TestServer) -> Database {
    let db = server.client().database("explain");
    let documents: Vec<Document> = (0..1000)
        .map(|i| doc! {"_id": i, "at": i * 10, "user": i % 20, "n": i % 7})
        .collect();
    db.collection::<Document>("events")
        .insert_many(documents)
        .await
        .unwrap();
    db.run_command(doc! {"createIndexes": "events", "indexes": [
        {"key": {"at": 1}, "name": "at_1"},
        {"key": {"user": 1, "at": 1}, "name": "user_1_at_1"},
    ]})
    .await
    .unwrap();
    db
}

#[tokio::test]
async fn explain_reports_each_plan_kind_with_measured_counters() {
    let server = TestServer::start().await;
    let db = events(&server).await;

    // IDHACK.
    let reply = explain(
        &db,
        doc! {"find": "events", "filter": {"_id": 5}},
        "executionStats",
    )
    .await;
    assert_eq!(reply.get_str("explainVersion").unwrap(), "1");
    let planner = reply.get_document("queryPlanner").unwrap();
    assert_eq!(planner.get_str("namespace").unwrap(), "explain.events");
    assert_eq!(
        stage(planner, &["winningPlan"]).get_str("stage").unwrap(),
        "IDHACK"
    );
    assert_eq!(counters(&reply), (1, 1, 1));

    // A range on an indexed field reads exactly its keys.
    let reply = explain(
        &db,
        doc! {"find": "events", "filter": {"at": {"$gte": 1000, "$lt": 1100}}},
        "executionStats",
    )
    .await;
    let winning = stage(&reply, &["queryPlanner", "winningPlan"]);
    assert_eq!(winning.get_str("stage").unwrap(), "FETCH");
    let ixscan = winning.get_document("inputStage").unwrap();
    assert_eq!(ixscan.get_str("stage").unwrap(), "IXSCAN");
    assert_eq!(ixscan.get_str("indexName").unwrap(), "at_1");
    assert_eq!(ixscan.get_document("keyPattern").unwrap(), &doc! {"at": 1});
    assert!(!ixscan.get_bool("isMultiKey").unwrap());
    assert_eq!(ixscan.get_str("direction").unwrap(), "forward");
    assert_eq!(
        ixscan.get_document("indexBounds").unwrap(),
        &doc! {"at": ["[1000, 1100)"]}
    );
    assert_eq!(counters(&reply), (10, 10, 10));

    // An `_id` range uses the primary key order.
    let reply = explain(
        &db,
        doc! {"find": "events", "filter": {"_id": {"$gte": 500, "$lt": 510}}},
        "executionStats",
    )
    .await;
    let ixscan = stage(&reply, &["queryPlanner", "winningPlan", "inputStage"]);
    assert_eq!(ixscan.get_str("indexName").unwrap(), "_id_");
    let stats = reply.get_document("executionStats").unwrap();
    assert_eq!(stats.get_i32("totalKeysExamined").unwrap(), 10);
    assert_eq!(stats.get_i32("nReturned").unwrap(), 10);

    // Newest first with a limit reads as many index entries as it returns.
    let reply = explain(
        &db,
        doc! {"find": "events", "sort": {"at": -1}, "limit": 5},
        "executionStats",
    )
    .await;
    let winning = stage(&reply, &["queryPlanner", "winningPlan"]);
    assert_eq!(winning.get_str("stage").unwrap(), "LIMIT");
    assert_eq!(winning.get_i32("limitAmount").unwrap(), 5);
    let ixscan = stage(winning, &["inputStage", "inputStage"]);
    assert_eq!(ixscan.get_str("indexName").unwrap(), "at_1");
    assert_eq!(ixscan.get_str("direction").unwrap(), "backward");
    assert_eq!(
        ixscan.get_document("indexBounds").unwrap(),
        &doc! {"at": ["[MaxKey, MinKey]"]}
    );
    assert_eq!(counters(&reply), (5, 5, 5));

    // An equality prefix then the sort field of a compound index.
    let reply = explain(
        &db,
        doc! {"find": "events", "filter": {"user": 3}, "sort": {"at": -1}, "limit": 2},
        "executionStats",
    )
    .await;
    let stats = reply.get_document("executionStats").unwrap();
    assert_eq!(stats.get_i32("nReturned").unwrap(), 2);
    assert_eq!(stats.get_i32("totalKeysExamined").unwrap(), 2);
    let ixscan = stage(
        &reply,
        &["queryPlanner", "winningPlan", "inputStage", "inputStage"],
    );
    assert_eq!(ixscan.get_str("indexName").unwrap(), "user_1_at_1");
    assert_eq!(
        ixscan.get_document("indexBounds").unwrap(),
        &doc! {"user": ["[3, 3]"], "at": ["[MaxKey, MinKey]"]}
    );

    // `$in` before the sort field: a merge of one sorted scan per value, reading as few keys
    // as the limit needs from each.
    let reply = explain(&db, doc! {"find": "events", "filter": {"user": {"$in": [1, 2, 3]}}, "sort": {"at": -1}, "limit": 4}, "executionStats").await;
    let winning = stage(&reply, &["queryPlanner", "winningPlan"]);
    assert_eq!(winning.get_str("stage").unwrap(), "LIMIT");
    let merge = stage(winning, &["inputStage", "inputStage"]);
    assert_eq!(merge.get_str("stage").unwrap(), "SORT_MERGE");
    assert_eq!(merge.get_document("sortPattern").unwrap(), &doc! {"at": -1});
    let scans = merge.get_array("inputStages").unwrap();
    assert_eq!(scans.len(), 3);
    assert_eq!(
        scans[0]
            .as_document()
            .unwrap()
            .get_document("indexBounds")
            .unwrap(),
        &doc! {"user": ["[1, 1]"], "at": ["[MaxKey, MinKey]"]}
    );
    let stats = reply.get_document("executionStats").unwrap();
    assert_eq!(stats.get_i32("nReturned").unwrap(), 4);
    assert!(stats.get_i32("totalKeysExamined").unwrap() <= 12, "{stats}");
    let newest: Vec<Document> = db
        .collection::<Document>("events")
        .find(doc! {"user": {"$in": [1, 2, 3]}})
        .sort(doc! {"at": -1})
        .limit(4)
        .projection(doc! {"_id": 1})
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap();
    assert_eq!(
        newest,
        vec![
            doc! {"_id": 983},
            doc! {"_id": 982},
            doc! {"_id": 981},
            doc! {"_id": 963}
        ]
    );

    // `$or` of two indexed equalities: a union of two index scans.
    let reply = explain(
        &db,
        doc! {"find": "events", "filter": {"$or": [{"user": 1}, {"user": 2}]}},
        "executionStats",
    )
    .await;
    let winning = stage(&reply, &["queryPlanner", "winningPlan"]);
    assert_eq!(winning.get_str("stage").unwrap(), "FETCH");
    let or = winning.get_document("inputStage").unwrap();
    assert_eq!(or.get_str("stage").unwrap(), "OR");
    assert_eq!(or.get_array("inputStages").unwrap().len(), 2);
    let stats = reply.get_document("executionStats").unwrap();
    assert_eq!(stats.get_i32("nReturned").unwrap(), 100);
    assert_eq!(stats.get_i32("totalKeysExamined").unwrap(), 100);

    // No usable index: a collection scan, and a blocking sort.
    let reply = explain(
        &db,
        doc! {"find": "events", "filter": {"n": 3}, "sort": {"n": 1}},
        "executionStats",
    )
    .await;
    let winning = stage(&reply, &["queryPlanner", "winningPlan"]);
    assert_eq!(winning.get_str("stage").unwrap(), "SORT");
    assert_eq!(winning.get_document("sortPattern").unwrap(), &doc! {"n": 1});
    assert_eq!(
        stage(winning, &["inputStage"]).get_str("stage").unwrap(),
        "COLLSCAN"
    );
    let stats = reply.get_document("executionStats").unwrap();
    assert_eq!(stats.get_i32("totalDocsExamined").unwrap(), 1000);
    assert_eq!(stats.get_i32("totalKeysExamined").unwrap(), 0);
    assert_eq!(stats.get_i32("nReturned").unwrap(), 143);

    // A blocking sort with a limit keeps only the top k.
    let reply = explain(
        &db,
        doc! {"find": "events", "filter": {"user": 3}, "sort": {"n": -1}, "skip": 1, "limit": 3},
        "executionStats",
    )
    .await;
    let winning = stage(&reply, &["queryPlanner", "winningPlan"]);
    assert_eq!(winning.get_str("stage").unwrap(), "LIMIT");
    let skip = stage(winning, &["inputStage"]);
    assert_eq!(skip.get_str("stage").unwrap(), "SKIP");
    let sort = stage(skip, &["inputStage"]);
    assert_eq!(sort.get_str("stage").unwrap(), "SORT");
    assert_eq!(sort.get_i32("limitAmount").unwrap(), 4);
    let stats = reply.get_document("executionStats").unwrap();
    assert_eq!(stats.get_i32("nReturned").unwrap(), 3);
    assert_eq!(stats.get_i32("totalKeysExamined").unwrap(), 50);
    let sorted = stage(stats, &["executionStages", "inputStage", "inputStage"]);
    assert_eq!(sorted.get_i32("nReturned").unwrap(), 4);

    // Contradictory bounds on a non-multikey index: nothing is read.
    let reply = explain(
        &db,
        doc! {"find": "events", "filter": {"at": {"$gt": 50, "$lt": 10}}},
        "executionStats",
    )
    .await;
    assert_eq!(
        stage(&reply, &["queryPlanner", "winningPlan"])
            .get_str("stage")
            .unwrap(),
        "EOF"
    );
    assert_eq!(
        reply
            .get_document("executionStats")
            .unwrap()
            .get_i32("totalDocsExamined")
            .unwrap(),
        0
    );

    // Hints: by name, by key pattern, and `$natural`.
    for (hint, expected) in [
        (Bson::String("user_1_at_1".into()), "user_1_at_1"),
        (doc! {"user": 1, "at": 1}.into(), "user_1_at_1"),
    ] {
        let reply = explain(
            &db,
            doc! {"find": "events", "filter": {"at": {"$gte": 100, "$lt": 200}}, "hint": hint},
            "queryPlanner",
        )
        .await;
        let ixscan = stage(&reply, &["queryPlanner", "winningPlan", "inputStage"]);
        assert_eq!(ixscan.get_str("indexName").unwrap(), expected);
        assert_eq!(
            ixscan.get_document("indexBounds").unwrap(),
            &doc! {"user": ["[MinKey, MaxKey]"], "at": ["[100, 200)"]}
        );
    }
    let reply = explain(
        &db,
        doc! {"find": "events", "filter": {"at": 100}, "hint": {"$natural": -1}},
        "queryPlanner",
    )
    .await;
    let winning = stage(&reply, &["queryPlanner", "winningPlan"]);
    assert_eq!(winning.get_str("stage").unwrap(), "COLLSCAN");
    assert_eq!(winning.get_str("direction").unwrap(), "backward");
}

#[tokio::test]
async fn explain_covers_count_distinct_aggregate_and_writes_without_writing() {
    let server = TestServer::start().await;
    let db = explain_db(&server).await;

    let reply = explain(
        &db,
        doc! {"count": "events", "query": {"at": {"$lt": 100}}},
        "executionStats",
    )
    .await;
    let winning = stage(&reply, &["queryPlanner", "winningPlan"]);
    assert_eq!(winning.get_str("stage").unwrap(), "COUNT");
    let count_scan = stage(winning, &["inputStage"]);
    assert_eq!(count_scan.get_str("stage").unwrap(), "COUNT_SCAN");
    assert_eq!(count_scan.get_str("indexName").unwrap(), "at_1");
    assert_eq!(
        count_scan.get_document("indexBounds").unwrap(),
        &doc! {"at": ["[-inf, 100)"]}
    );
    let execution = stage(&reply, &["executionStats", "executionStages"]);
    assert_eq!(execution.get_i32("nCounted").unwrap(), 10);
    // Counted from the keys alone: no document read.
    assert_eq!(
        stage(execution, &["inputStage"]).get_str("stage").unwrap(),
        "COUNT_SCAN"
    );
    assert_eq!(
        stage(&reply, &["executionStats"])
            .get_i32("totalDocsExamined")
            .unwrap(),
        0
    );
    assert_eq!(
        stage(&reply, &["executionStats"])
            .get_i32("totalKeysExamined")
            .unwrap(),
        10
    );
    // A filter the keys do not answer exactly fetches the documents.
    let reply = explain(
        &db,
        doc! {"count": "events", "query": {"at": {"$lt": 100}, "n": 1}},
        "executionStats",
    )
    .await;
    let execution = stage(&reply, &["executionStats", "executionStages"]);
    assert_eq!(
        stage(execution, &["inputStage"]).get_str("stage").unwrap(),
        "FETCH"
    );
    assert_eq!(execution.get_i32("nCounted").unwrap(), 2);

    let reply = explain(
        &db,
        doc! {"distinct": "events", "key": "user", "query": {"user": {"$in": [1, 2]}}},
        "executionStats",
    )
    .await;
    let winning = stage(&reply, &["queryPlanner", "winningPlan"]);
    // One document per distinct value, jumping from one key value to the next.
    let scan = stage(winning, &["inputStage", "inputStage"]);
    assert_eq!(scan.get_str("stage").unwrap(), "DISTINCT_SCAN");
    assert_eq!(scan.get_str("indexName").unwrap(), "user_1_at_1");
    let execution = stage(&reply, &["executionStats"]);
    assert_eq!(execution.get_i32("totalDocsExamined").unwrap(), 2);
    assert_eq!(execution.get_i32("totalKeysExamined").unwrap(), 2);
    let reply = db
        .run_command(doc! {"distinct": "events", "key": "user", "query": {"user": {"$in": [1, 2]}}})
        .await
        .unwrap();
    assert_eq!(
        reply.get_array("values").unwrap(),
        &vec![Bson::Int32(1), Bson::Int32(2)]
    );
    let reply = db
        .run_command(doc! {"distinct": "events", "key": "user"})
        .await
        .unwrap();
    assert_eq!(reply.get_array("values").unwrap().len(), 20);
    let reply = explain(
        &db,
        doc! {"distinct": "events", "key": "user"},
        "executionStats",
    )
    .await;
    assert_eq!(
        stage(&reply, &["executionStats"])
            .get_i32("totalDocsExamined")
            .unwrap(),
        20
    );

    let reply = explain(&db, doc! {"aggregate": "events", "pipeline": [{"$match": {"at": 50}}, {"$project": {"at": 1}}], "cursor": {}}, "executionStats").await;
    let stages = reply.get_array("stages").unwrap();
    let cursor = stages[0]
        .as_document()
        .unwrap()
        .get_document("$cursor")
        .unwrap();
    let ixscan = stage(cursor, &["queryPlanner", "winningPlan", "inputStage"]);
    assert_eq!(ixscan.get_str("indexName").unwrap(), "at_1");
    assert_eq!(
        stage(cursor, &["executionStats"])
            .get_i32("nReturned")
            .unwrap(),
        1
    );
    assert_eq!(
        stages[1].as_document().unwrap(),
        &doc! {"$project": {"at": 1}}
    );
    // A leading `$sort` + `$limit` is read in index order and stops after the limit.
    let reply = explain(&db, doc! {"aggregate": "events", "pipeline": [{"$match": {"user": 3}}, {"$sort": {"at": -1}}, {"$limit": 2}], "cursor": {}}, "executionStats").await;
    let cursor = reply.get_array("stages").unwrap()[0]
        .as_document()
        .unwrap()
        .get_document("$cursor")
        .unwrap();
    let ixscan = stage(cursor, &["queryPlanner", "winningPlan", "inputStage"]);
    assert_eq!(ixscan.get_str("indexName").unwrap(), "user_1_at_1");
    assert_eq!(ixscan.get_str("direction").unwrap(), "backward");
    assert_eq!(
        stage(cursor, &["executionStats"])
            .get_i32("totalKeysExamined")
            .unwrap(),
        2
    );
    let newest: Vec<Document> = db
        .collection::<Document>("events")
        .aggregate(vec![
            doc! {"$match": {"user": 3}},
            doc! {"$sort": {"at": -1}},
            doc! {"$limit": 2},
            doc! {"$project": {"_id": 1}},
        ])
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap();
    assert_eq!(newest, vec![doc! {"_id": 983}, doc! {"_id": 963}]);
    // A `$match` after stages it does not read moves ahead of them, as mongod's optimizer
    // moves it, and reaches the planner.
    let reply = explain(&db, doc! {"aggregate": "events", "pipeline": [{"$sort": {"user": 1}}, {"$set": {"late": true}}, {"$match": {"at": 50}}], "cursor": {}}, "executionStats").await;
    let stages = reply.get_array("stages").unwrap();
    let cursor = stages[0]
        .as_document()
        .unwrap()
        .get_document("$cursor")
        .unwrap();
    let ixscan = stage(cursor, &["queryPlanner", "winningPlan", "inputStage"]);
    assert_eq!(ixscan.get_str("indexName").unwrap(), "at_1");
    assert_eq!(
        stages[1..].to_vec(),
        vec![
            Bson::Document(doc! {"$sort": {"user": 1}}),
            Bson::Document(doc! {"$set": {"late": true}})
        ]
    );
    // `explain: true` on aggregate itself.
    let reply = db
        .run_command(
            doc! {"aggregate": "events", "pipeline": [{"$match": {"at": 50}}], "explain": true},
        )
        .await
        .unwrap();
    assert!(reply.get_array("stages").is_ok());

    let reply = explain(&db, doc! {"update": "events", "updates": [{"q": {"user": 4}, "u": {"$set": {"n": 0}}, "multi": true}]}, "executionStats").await;
    let execution = stage(&reply, &["executionStats", "executionStages"]);
    assert_eq!(execution.get_str("stage").unwrap(), "UPDATE");
    assert_eq!(execution.get_i32("nMatched").unwrap(), 50);
    // n == i % 7 and user == i % 20: among user 4, n is already 0 for i ≡ 0 (mod 7).
    let already = (0..1000).filter(|i| i % 20 == 4 && i % 7 == 0).count() as i32;
    assert_eq!(execution.get_i32("nWouldModify").unwrap(), 50 - already);
    let reply = explain(
        &db,
        doc! {"delete": "events", "deletes": [{"q": {"at": {"$lt": 30}}, "limit": 0}]},
        "executionStats",
    )
    .await;
    assert_eq!(
        stage(&reply, &["executionStats", "executionStages"])
            .get_i32("nWouldDelete")
            .unwrap(),
        3
    );
    let reply = explain(
        &db,
        doc! {"findAndModify": "events", "query": {"user": 5}, "sort": {"at": -1}, "remove": true},
        "queryPlanner",
    )
    .await;
    let winning = stage(&reply, &["queryPlanner", "winningPlan"]);
    assert_eq!(winning.get_str("stage").unwrap(), "DELETE");
    // Nothing was written.
    let events = db.collection::<Document>("events");
    assert_eq!(events.count_documents(doc! {}).await.unwrap(), 1000);
    assert_eq!(events.count_documents(doc! {"n": 0}).await.unwrap(), 143);

    // A write batch of more than one statement cannot be explained.
    let error = db
        .run_command(doc! {"explain": {"delete": "events", "deletes": [{"q": {}, "limit": 0}, {"q": {}, "limit": 0}]}})
        .await
        .unwrap_err();
    assert!(
        error
            .to_string()
            .contains("explained write batches must be of size 1"),
        "{error}"
    );
}

async fn explain_db(server: &TestServer) -> Database {
    events(server).await
}

#[tokio::test]
async fn multikey_indexes_keep_one_predicates_bounds_and_index_changes_replan() {
    let server = TestServer::start().await;
    let db = server.client().database("multikey");
    let c = db.collection::<Document>("c");
    c.insert_many((0..100).map(|i| doc! {"_id": i, "a": i, "b": i % 10}))
        .await
        .unwrap();
    db.run_command(doc! {"createIndexes": "c", "indexes": [{"key": {"a": 1}, "name": "a_1"}]})
        .await
        .unwrap();
    let bounds = |reply: &Document| {
        stage(reply, &["queryPlanner", "winningPlan", "inputStage"])
            .get_document("indexBounds")
            .unwrap()
            .clone()
    };
    let range = doc! {"find": "c", "filter": {"a": {"$gte": 10, "$lte": 20}}};
    assert_eq!(
        bounds(&explain(&db, range.clone(), "queryPlanner").await),
        doc! {"a": ["[10, 20]"]}
    );
    // An array makes the index multikey: {a: [5, 30]} matches (5 <= 20 and 30 >= 10), so the
    // two bounds must not be intersected.
    c.insert_one(doc! {"_id": 1000, "a": [5, 30]})
        .await
        .unwrap();
    let reply = explain(&db, range.clone(), "executionStats").await;
    assert!(
        stage(&reply, &["queryPlanner", "winningPlan", "inputStage"])
            .get_bool("isMultiKey")
            .unwrap()
    );
    assert_eq!(bounds(&reply), doc! {"a": ["[10, inf]"]});
    let found: Vec<Document> = c
        .find(range.get_document("filter").unwrap().clone())
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap();
    assert_eq!(found.len(), 12);

    // A better index created later is chosen (cached plans are keyed by the index set).
    let both = doc! {"find": "c", "filter": {"a": {"$gte": 0}, "b": 3}};
    let chosen = |reply: &Document| {
        stage(reply, &["queryPlanner", "winningPlan", "inputStage"])
            .get_str("indexName")
            .unwrap()
            .to_string()
    };
    assert_eq!(
        chosen(&explain(&db, both.clone(), "queryPlanner").await),
        "a_1"
    );
    db.run_command(doc! {"createIndexes": "c", "indexes": [{"key": {"b": 1}, "name": "b_1"}]})
        .await
        .unwrap();
    let reply = explain(&db, both.clone(), "allPlansExecution").await;
    assert_eq!(chosen(&reply), "b_1");
    assert_eq!(
        reply
            .get_document("queryPlanner")
            .unwrap()
            .get_array("rejectedPlans")
            .unwrap()
            .len(),
        1
    );
    assert_eq!(
        stage(&reply, &["executionStats"])
            .get_array("allPlansExecution")
            .unwrap()
            .len(),
        2
    );
    db.run_command(doc! {"dropIndexes": "c", "index": "b_1"})
        .await
        .unwrap();
    assert_eq!(chosen(&explain(&db, both, "queryPlanner").await), "a_1");
}

#[tokio::test]
async fn counts_and_index_reads_never_include_expired_documents() {
    use std::sync::Arc;
    use tideway_base::clock::{Clock, ManualClock};
    let clock = Arc::new(ManualClock::new(1_700_000_000_000));
    let config = tideway::Config {
        set_parameter: vec!["ttlMonitorEnabled=false".into()],
        ..common::test_config()
    };
    let server = TestServer::start_with_clock(config, clock.clone()).await;
    let db = server.client().database("expiry");
    let now = clock.now_ms();
    let c = db.collection::<Document>("c");
    // Half the documents expire 10 s from now under a TTL index on `expireAt`.
    c.insert_many((0..100).map(|i| {
        let expire_in = if i % 2 == 0 { 10_000 } else { 3_600_000 };
        doc! {"_id": i, "a": i, "expireAt": bson::DateTime::from_millis(now + expire_in)}
    }))
    .await
    .unwrap();
    db.run_command(doc! {"createIndexes": "c", "indexes": [
        {"key": {"a": 1}, "name": "a_1"},
        {"key": {"expireAt": 1}, "name": "ttl", "expireAfterSeconds": 0},
    ]})
    .await
    .unwrap();
    let window = doc! {"a": {"$gte": 10, "$lt": 30}};
    assert_eq!(c.count_documents(window.clone()).await.unwrap(), 20);
    clock.advance_ms(10_000);
    // Nothing reaped yet: the index still holds the expired documents' keys.
    assert_eq!(c.count_documents(window.clone()).await.unwrap(), 10);
    let reply = db
        .run_command(doc! {"count": "c", "query": window.clone()})
        .await
        .unwrap();
    assert_eq!(reply.get_i32("n").unwrap(), 10);
    let found: Vec<Document> = c
        .find(window.clone())
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap();
    assert!(found.iter().all(|d| d.get_i32("a").unwrap() % 2 == 1));
    assert_eq!(found.len(), 10);
    // Judging expiry needs the documents: the count fetches them.
    let reply = explain(&db, doc! {"count": "c", "query": window}, "executionStats").await;
    let execution = stage(&reply, &["executionStats", "executionStages"]);
    assert_eq!(
        stage(execution, &["inputStage"]).get_str("stage").unwrap(),
        "FETCH"
    );
    assert_eq!(execution.get_i32("nCounted").unwrap(), 10);
}

#[tokio::test]
async fn the_profiler_records_plan_summaries_and_examined_counts() {
    let server = TestServer::start().await;
    let db = events(&server).await;
    db.run_command(doc! {"profile": 2}).await.unwrap();
    let events = db.collection::<Document>("events");
    let found: Vec<Document> = events
        .find(doc! {"at": {"$gte": 1000, "$lt": 1100}})
        .comment("range")
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap();
    assert_eq!(found.len(), 10);
    events
        .update_many(doc! {"user": 4}, doc! {"$set": {"seen": true}})
        .await
        .unwrap();
    db.run_command(doc! {"profile": 0}).await.unwrap();
    let entries: Vec<Document> = db
        .collection::<Document>("system.profile")
        .find(doc! {"ns": "explain.events"})
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap();
    let find = entries
        .iter()
        .find(|entry| entry.get_str("op") == Ok("query"))
        .expect("a profiled find");
    assert_eq!(find.get_str("planSummary").unwrap(), "IXSCAN { at: 1 }");
    assert_eq!(
        find.get_i64("keysExamined")
            .or_else(|_| find.get_i32("keysExamined").map(i64::from))
            .unwrap(),
        10
    );
    assert_eq!(
        find.get_i64("docsExamined")
            .or_else(|_| find.get_i32("docsExamined").map(i64::from))
            .unwrap(),
        10
    );
    let update = entries
        .iter()
        .find(|entry| entry.get_str("op") == Ok("update"))
        .expect("a profiled update");
    assert_eq!(
        update.get_str("planSummary").unwrap(),
        "IXSCAN { user: 1, at: 1 }"
    );
    assert_eq!(
        update
            .get_i64("keysExamined")
            .or_else(|_| update.get_i32("keysExamined").map(i64::from))
            .unwrap(),
        50
    );
}

#[tokio::test]
async fn hashed_and_wildcard_indexes_answer_the_queries_they_can() {
    let server = TestServer::start().await;
    let db = server.client().database("kinds");
    let c = db.collection::<Document>("c");
    c.insert_many((0..200).map(|i| {
        doc! {"_id": i, "h": i % 50, "attrs": {"color": if i % 2 == 0 { "red" } else { "blue" }, "size": i}, "tags": [format!("t{}", i % 3), "all"]}
    }))
    .await
    .unwrap();
    db.run_command(doc! {"createIndexes": "c", "indexes": [
        {"key": {"h": "hashed"}, "name": "h_hashed"},
        {"key": {"$**": 1}, "name": "wild"},
    ]})
    .await
    .unwrap();
    let winning = |reply: &Document| stage(reply, &["queryPlanner", "winningPlan"]).clone();

    // Equality on a hashed field: a point on its hash.
    let reply = explain(
        &db,
        doc! {"find": "c", "filter": {"h": 7}},
        "executionStats",
    )
    .await;
    let ixscan = stage(&winning(&reply), &["inputStage"]).clone();
    assert_eq!(ixscan.get_str("indexName").unwrap(), "h_hashed");
    let stats = reply.get_document("executionStats").unwrap();
    assert_eq!(stats.get_i32("nReturned").unwrap(), 4);
    assert_eq!(stats.get_i32("totalKeysExamined").unwrap(), 4);
    let reply = explain(
        &db,
        doc! {"find": "c", "filter": {"h": {"$in": [7, 8]}}},
        "executionStats",
    )
    .await;
    assert_eq!(
        reply
            .get_document("executionStats")
            .unwrap()
            .get_i32("nReturned")
            .unwrap(),
        8
    );
    // A range cannot use the hashes, nor can a sort: the wildcard index serves the range.
    let reply = explain(
        &db,
        doc! {"find": "c", "filter": {"h": {"$gt": 45}}, "sort": {"h": 1}},
        "queryPlanner",
    )
    .await;
    let winning_plan = winning(&reply);
    assert_eq!(winning_plan.get_str("stage").unwrap(), "SORT");
    assert_eq!(
        stage(&winning_plan, &["inputStage", "inputStage"])
            .get_str("indexName")
            .unwrap(),
        "wild"
    );
    // Counting needs the documents: hashes collide.
    let reply = explain(
        &db,
        doc! {"count": "c", "query": {"h": 7}},
        "executionStats",
    )
    .await;
    assert_eq!(
        stage(&winning(&reply), &["inputStage"])
            .get_str("stage")
            .unwrap(),
        "FETCH"
    );

    // A wildcard index answers a path below it, arrays element by element.
    let reply = explain(
        &db,
        doc! {"find": "c", "filter": {"attrs.size": {"$gte": 10, "$lt": 20}}},
        "executionStats",
    )
    .await;
    let ixscan = stage(&winning(&reply), &["inputStage"]).clone();
    assert_eq!(ixscan.get_str("indexName").unwrap(), "wild");
    assert_eq!(
        ixscan.get_document("indexBounds").unwrap(),
        &doc! {"$_path": ["[\"attrs.size\", \"attrs.size\"]"], "attrs.size": ["[10, inf]"]}
    );
    assert_eq!(
        reply
            .get_document("executionStats")
            .unwrap()
            .get_i32("nReturned")
            .unwrap(),
        10
    );
    let tagged: Vec<Document> = c
        .find(doc! {"tags": "t1"})
        .hint(mongodb::options::Hint::Name("wild".into()))
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap();
    assert_eq!(tagged.len(), 67);
    // Missing paths have no wildcard keys: null and negations read the collection.
    let reply = explain(
        &db,
        doc! {"find": "c", "filter": {"attrs.weight": null}},
        "executionStats",
    )
    .await;
    assert_eq!(winning(&reply).get_str("stage").unwrap(), "COLLSCAN");
    assert_eq!(
        reply
            .get_document("executionStats")
            .unwrap()
            .get_i32("nReturned")
            .unwrap(),
        200
    );
}

#[tokio::test]
async fn a_cached_plan_that_needs_far_more_work_is_planned_again() {
    let server = TestServer::start().await;
    let db = server.client().database("replan");
    db.collection::<Document>("c")
        .insert_many((0..2000).map(|i| doc! {"_id": i, "a": i, "b": i}))
        .await
        .unwrap();
    db.run_command(doc! {"createIndexes": "c", "indexes": [
        {"key": {"a": 1}, "name": "a_1"},
        {"key": {"b": 1}, "name": "b_1"},
    ]})
    .await
    .unwrap();
    let chosen = |reply: Document| {
        stage(&reply, &["queryPlanner", "winningPlan", "inputStage"])
            .get_str("indexName")
            .unwrap()
            .to_string()
    };
    // `a` is selective: a_1 wins and is cached for the shape.
    let first = doc! {"find": "c", "filter": {"a": {"$lt": 5}, "b": {"$lt": 2000}}};
    assert_eq!(chosen(explain(&db, first, "queryPlanner").await), "a_1");
    // The same shape where `b` is selective: the cached a_1 would read 2000 keys for 5
    // documents; it is evicted and b_1 chosen.
    let second = doc! {"find": "c", "filter": {"a": {"$lt": 2000}, "b": {"$lt": 5}}};
    let reply = explain(&db, second.clone(), "executionStats").await;
    assert_eq!(chosen(reply.clone()), "b_1");
    assert!(
        reply
            .get_document("executionStats")
            .unwrap()
            .get_i32("totalKeysExamined")
            .unwrap()
            < 200
    );
    // And b_1 is what the cache now holds for the shape.
    assert_eq!(chosen(explain(&db, second, "queryPlanner").await), "b_1");
}

/// The encoded documents of a find, in the order returned.
async fn encoded(
    collection: &Collection<Document>,
    filter: Document,
    projection: Document,
) -> Vec<Vec<u8>> {
    encode(&common::find_all(collection, filter, projection).await)
}

fn encode(documents: &[Document]) -> Vec<Vec<u8>> {
    documents
        .iter()
        .map(|document| bson::to_vec(document).unwrap())
        .collect()
}

#[tokio::test]
async fn covered_queries_answer_from_index_keys_with_each_values_own_type() {
    let server = TestServer::start().await;
    let db = server.client().database("covered");
    let items = db.collection::<Document>("items");
    let decimal = |text: &str| Bson::Decimal128(text.parse().unwrap());
    // Equal numbers of every type, -0.0, a decimal with trailing zeros, a symbol, an explicit
    // null and a missing field: keys alone cannot tell these apart, the type bits can.
    let values = [
        Bson::Int32(1),
        Bson::Int64(1),
        Bson::Double(1.0),
        Bson::Double(-0.0),
        decimal("1.50"),
        Bson::String("x".into()),
        Bson::Symbol("x".into()),
        Bson::Null,
    ];
    let mut documents: Vec<Document> = values
        .iter()
        .enumerate()
        .map(|(i, a)| doc! {"_id": i as i32, "a": a.clone(), "b": i as i64, "c": "payload"})
        .collect();
    documents.push(doc! {"_id": 100, "a": 2, "c": "no b"});
    items.insert_many(documents.clone()).await.unwrap();
    // Built over existing documents (the build writes type bits too), then written through.
    db.run_command(doc! {"createIndexes": "items", "indexes": [
        {"key": {"a": 1, "b": 1}, "name": "a_1_b_1"},
        {"key": {"b": 1}, "name": "b_1", "unique": true},
    ]})
    .await
    .unwrap();
    items
        .insert_one(doc! {"_id": 200, "a": 2.5, "b": 200_i64})
        .await
        .unwrap();

    // Every document but the null one (`1` matches all four numeric 1s, `0` matches -0.0, `1.5`
    // the decimal, "x" the string and the symbol).
    let all = doc! {"a": {"$in": [1, 0, 1.5, "x", 2, 2.5]}};
    let projection = doc! {"a": 1, "b": 1, "_id": 0};
    let reply = explain(
        &db,
        doc! {"find": "items", "filter": all.clone(), "projection": projection.clone(), "hint": "a_1_b_1"},
        "executionStats",
    )
    .await;
    let winning = stage(&reply, &["queryPlanner", "winningPlan"]);
    assert_eq!(winning.get_str("stage").unwrap(), "PROJECTION_COVERED");
    let ixscan = winning.get_document("inputStage").unwrap();
    assert_eq!(ixscan.get_str("stage").unwrap(), "IXSCAN");
    assert_eq!(ixscan.get_str("indexName").unwrap(), "a_1_b_1");
    let stats = reply.get_document("executionStats").unwrap();
    assert_eq!(stats.get_i32("nReturned").unwrap(), 9);
    assert_eq!(stats.get_i32("totalDocsExamined").unwrap(), 0);

    // Exactly the values a scan projects, types included; a missing field stays missing.
    let covered = encoded(&items, all.clone(), projection.clone()).await;
    let mut expected: Vec<Document> = documents
        .iter()
        .filter(|document| document.get("a") != Some(&Bson::Null))
        .map(|document| {
            let mut out = doc! {"a": document.get("a").unwrap().clone()};
            if let Some(b) = document.get("b") {
                out.insert("b", b.clone());
            }
            out
        })
        .collect();
    expected.push(doc! {"a": 2.5, "b": 200_i64});
    let mut sorted_covered = covered.clone();
    sorted_covered.sort();
    let mut sorted_expected = encode(&expected);
    sorted_expected.sort();
    assert_eq!(sorted_covered, sorted_expected);

    // An update that keeps the key but changes the type (Int32 1 → Double 1.0) rewrites the
    // entry's type bits.
    items
        .update_one(doc! {"_id": 0}, doc! {"$set": {"a": 1.0}})
        .await
        .unwrap();
    let after = encoded(&items, doc! {"b": 0_i64}, doc! {"b": 1, "a": 1, "_id": 0}).await;
    let reply = explain(
        &db,
        doc! {"find": "items", "filter": {"b": 0_i64}, "projection": {"b": 1, "_id": 0}},
        "executionStats",
    )
    .await;
    assert_eq!(
        stage(&reply, &["queryPlanner", "winningPlan"])
            .get_str("stage")
            .unwrap(),
        "PROJECTION_COVERED"
    );
    assert_eq!(
        stage(&reply, &["executionStats"])
            .get_i32("totalDocsExamined")
            .unwrap(),
        0
    );
    // `a` is not in b_1: that projection fetches, and sees the new double.
    assert_eq!(after, encode(&[doc! {"a": 1.0, "b": 0_i64}]));
    let covered_a = encoded(&items, doc! {"a": 1, "b": 0_i64}, doc! {"a": 1, "_id": 0}).await;
    assert_eq!(covered_a, encode(&[doc! {"a": 1.0}]));

    // Needing a field the index lacks (here `_id`, included by default) means fetching.
    let reply = explain(
        &db,
        doc! {"find": "items", "filter": {"b": {"$gt": 5_i64}}, "projection": {"b": 1}},
        "executionStats",
    )
    .await;
    let winning = stage(&reply, &["queryPlanner", "winningPlan"]);
    assert_eq!(winning.get_str("stage").unwrap(), "PROJECTION_DEFAULT");
    assert_eq!(
        stage(winning, &["inputStage"]).get_str("stage").unwrap(),
        "FETCH"
    );

    // A document with an array makes the index multikey: no longer covered, still right.
    items
        .insert_one(doc! {"_id": 300, "a": [7, 8], "b": 300_i64})
        .await
        .unwrap();
    let reply = explain(
        &db,
        doc! {"find": "items", "filter": {"a": {"$gte": 7}}, "projection": {"a": 1, "_id": 0}, "hint": "a_1_b_1"},
        "executionStats",
    )
    .await;
    assert_eq!(
        stage(&reply, &["queryPlanner", "winningPlan", "inputStage"])
            .get_str("stage")
            .unwrap(),
        "FETCH"
    );
    assert_eq!(
        encoded(&items, doc! {"a": {"$gte": 7}}, doc! {"a": 1, "_id": 0}).await,
        encode(&[doc! {"a": [7, 8]}])
    );
}

#[tokio::test]
async fn covered_reads_are_not_used_where_documents_can_expire() {
    let server = TestServer::start().await;
    let db = server.client().database("covered_ttl");
    let sessions = db.collection::<Document>("sessions");
    sessions
        .insert_many((0..10).map(|i| doc! {"_id": i, "user": i, "at": bson::DateTime::now()}))
        .await
        .unwrap();
    db.run_command(doc! {"createIndexes": "sessions", "indexes": [
        {"key": {"user": 1}, "name": "user_1"},
        {"key": {"at": 1}, "name": "at_1", "expireAfterSeconds": 3600},
    ]})
    .await
    .unwrap();
    let reply = explain(
        &db,
        doc! {"find": "sessions", "filter": {"user": {"$gte": 3}}, "projection": {"user": 1, "_id": 0}},
        "executionStats",
    )
    .await;
    // Expiry is judged on the stored document (its `at`), so every match is fetched.
    let winning = stage(&reply, &["queryPlanner", "winningPlan"]);
    assert_eq!(winning.get_str("stage").unwrap(), "PROJECTION_DEFAULT");
    assert_eq!(
        stage(&reply, &["executionStats"])
            .get_i32("totalDocsExamined")
            .unwrap(),
        7
    );
}
