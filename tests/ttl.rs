//! Time-to-live through the official driver, with an injected clock: for every read and write path,
//! a document is invisible from the instant it expires and visible one millisecond before; the
//! reaper deletes physically, respects revisions, survives restarts; policies change at once.

mod common;

use std::sync::Arc;

use bson::{doc, Bson, Document};
use common::{command_error, TestServer};
use futures::TryStreamExt;
use mongodb::options::IndexOptions;
use mongodb::{Collection, Database, IndexModel};
use tideway_base::clock::{Clock, ManualClock};
use tideway_storage::Namespace;

const T0: i64 = 1_700_000_000_000;

struct Fixture {
    server: TestServer,
    clock: Arc<ManualClock>,
    db: Database,
    coll: Collection<Document>,
}

impl Fixture {
    async fn start() -> Fixture {
        let (server, clock) = TestServer::start_at(T0).await;
        let db = server.client().database("ttl");
        let coll = db.collection::<Document>("c");
        Fixture {
            server,
            clock,
            db,
            coll,
        }
    }

    /// A collection whose documents expire 10 s after their last write, with one such document
    /// written at T0 (plus one that never expires).
    async fn with_default_ttl() -> Fixture {
        let fixture = Fixture::start().await;
        fixture.set_default_ttl(10).await;
        fixture
            .coll
            .insert_one(doc! {"_id": "doomed", "k": 1, "tag": "x"})
            .await
            .unwrap();
        fixture
            .coll
            .insert_one(doc! {"_id": "keeper", "k": 2, "tag": "y", "ttl": -1})
            .await
            .unwrap();
        fixture
    }

    /// `createIndex({_ts: 1}, {expireAfterSeconds})` (raw, since the driver's option cannot say -1).
    async fn set_default_ttl(&self, seconds: i32) {
        let spec = doc! {"key": {"_ts": 1}, "name": "_ts_1", "expireAfterSeconds": seconds};
        self.run(doc! {"createIndexes": "c", "indexes": [spec]})
            .await;
    }

    fn at(&self, ms_after_t0: i64) {
        let target = T0 + ms_after_t0;
        let now = self.clock.now_ms();
        assert!(target >= now, "the clock only moves forward");
        self.clock.advance_ms(target - now);
    }

    async fn run(&self, command: Document) -> Document {
        self.db
            .run_command(command)
            .await
            .expect("command succeeds")
    }

    async fn ids(&self, filter: Document) -> Vec<String> {
        let found: Vec<Document> = self
            .coll
            .find(filter)
            .await
            .unwrap()
            .try_collect()
            .await
            .unwrap();
        found
            .iter()
            .map(|d| d.get_str("_id").unwrap_or("?").to_string())
            .collect()
    }

    async fn stored(&self, id: &str) -> Option<tideway_storage::Record> {
        self.server
            .state
            .storage
            .get(&Namespace::new("ttl", "c"), &Bson::from(id))
            .await
            .unwrap()
    }

    /// `serverStatus().metrics.ttl.deletedDocuments`.
    async fn deleted_documents(&self) -> i64 {
        self.run(doc! {"serverStatus": 1})
            .await
            .get_document("metrics")
            .and_then(|metrics| metrics.get_document("ttl"))
            .and_then(|ttl| ttl.get_i64("deletedDocuments"))
            .unwrap()
    }

    async fn ttl_pass(&self) -> i64 {
        let admin = self.server.client().database("admin");
        admin
            .run_command(doc! {"runTtlPass": 1})
            .await
            .unwrap()
            .get_i64("deleted")
            .unwrap()
    }
}

/// Runs `probe` 1 ms before the expiry (expects `before`) and at the expiry instant (`after`).
macro_rules! at_the_boundary {
    ($fixture:expr, $expiry_ms:expr, $probe:expr, $before:expr, $after:expr) => {{
        $fixture.at($expiry_ms - 1);
        assert_eq!($probe.await, $before, "one millisecond before the expiry");
        $fixture.at($expiry_ms);
        assert_eq!($probe.await, $after, "at the expiry instant");
    }};
}

#[tokio::test]
async fn find_full_scan_index_scan_and_point_lookup() {
    let f = Fixture::with_default_ttl().await;
    f.coll
        .create_index(IndexModel::builder().keys(doc! {"k": 1}).build())
        .await
        .unwrap();
    f.at(9_999);
    assert_eq!(f.ids(doc! {}).await, vec!["doomed", "keeper"]);
    assert_eq!(f.ids(doc! {"k": 1}).await, vec!["doomed"]);
    assert_eq!(f.ids(doc! {"_id": "doomed"}).await, vec!["doomed"]);
    f.at(10_000);
    assert_eq!(f.ids(doc! {}).await, vec!["keeper"]);
    assert!(f.ids(doc! {"k": 1}).await.is_empty(), "index scan");
    assert!(
        f.ids(doc! {"_id": "doomed"}).await.is_empty(),
        "point lookup"
    );
    assert!(
        f.stored("doomed").await.is_some(),
        "still stored until the reaper runs"
    );
}

#[tokio::test]
async fn cursors_opened_before_the_expiry_do_not_return_it_after() {
    // Streaming (natural order) and buffered (in-memory sort) find cursors, and aggregate
    // cursors over pipelines with no blocking stage, which read as their batches ask.
    let commands = [
        doc! {"find": "c", "batchSize": 2},
        doc! {"find": "c", "batchSize": 2, "sort": {"n": -1}},
        doc! {
            "aggregate": "c",
            "pipeline": [{"$match": {"n": {"$gte": -1000}}}, {"$project": {"n": 1}}],
            "cursor": {"batchSize": 2},
        },
        doc! {
            "aggregate": "c",
            "pipeline": [{"$addFields": {"seen": true}}, {"$unset": "seen"}],
            "cursor": {"batchSize": 2},
        },
    ];
    for command in commands {
        let f = Fixture::start().await;
        f.set_default_ttl(10).await;
        let docs: Vec<Document> = (0..10)
            .map(|i| doc! {"_id": format!("d{i}"), "n": i})
            .collect();
        f.coll.insert_many(docs).await.unwrap();
        f.at(5_000);
        f.coll
            .insert_one(doc! {"_id": "late", "n": -100})
            .await
            .unwrap();
        f.at(9_999);
        let reply = f.run(command.clone()).await;
        let cursor = reply.get_document("cursor").unwrap();
        assert_eq!(cursor.get_array("firstBatch").unwrap().len(), 2);
        let id = cursor.get_i64("id").unwrap();
        f.at(10_000);
        let more = f.run(doc! {"getMore": id, "collection": "c"}).await;
        let batch = more
            .get_document("cursor")
            .unwrap()
            .get_array("nextBatch")
            .unwrap()
            .clone();
        let ids: Vec<&str> = batch
            .iter()
            .map(|d| d.as_document().unwrap().get_str("_id").unwrap())
            .collect();
        assert_eq!(
            ids,
            vec!["late"],
            "{command}: only the document written at 5 s is left"
        );
    }
}

#[tokio::test]
async fn counts_and_distinct() {
    let f = Fixture::with_default_ttl().await;
    let count = |query: Document| {
        let db = f.db.clone();
        async move {
            db.run_command(doc! {"count": "c", "query": query})
                .await
                .unwrap()
                .get_i32("n")
                .unwrap()
        }
    };
    at_the_boundary!(f, 10_000, count(doc! {}), 2, 1);
    f.at(20_000);
    assert_eq!(count(doc! {"tag": "x"}).await, 0);
    assert_eq!(f.coll.estimated_document_count().await.unwrap(), 1);
    assert_eq!(f.coll.count_documents(doc! {}).await.unwrap(), 1);
    let distinct = f.coll.distinct("tag", doc! {}).await.unwrap();
    assert_eq!(distinct, vec![Bson::from("y")]);
}

#[tokio::test]
async fn distinct_and_aggregate_at_the_boundary() {
    let f = Fixture::with_default_ttl().await;
    let tags = || async { f.coll.distinct("tag", doc! {}).await.unwrap().len() };
    at_the_boundary!(f, 10_000, tags(), 2, 1);
    let f = Fixture::with_default_ttl().await;
    let grouped = || async {
        let cursor = f
            .coll
            .aggregate(vec![
                doc! {"$match": {}},
                doc! {"$group": {"_id": null, "n": {"$sum": 1}}},
            ])
            .await
            .unwrap();
        let out: Vec<Document> = cursor.try_collect().await.unwrap();
        out[0].get_i32("n").unwrap()
    };
    at_the_boundary!(f, 10_000, grouped(), 2, 1);
}

/// `$graphLookup` reads through the same hiding as every other read: once a link of a chain
/// expires, the search neither returns it nor follows it.
#[tokio::test]
async fn graph_lookup_never_follows_an_expired_document() {
    let f = Fixture::start().await;
    f.set_default_ttl(-1).await;
    f.coll
        .insert_many(vec![
            doc! {"_id": 1, "name": "a", "next": "b"},
            doc! {"_id": 2, "name": "b", "next": "c", "ttl": 5},
            doc! {"_id": 3, "name": "c"},
        ])
        .await
        .unwrap();
    let chain = || async {
        let reply = f
            .run(doc! {"aggregate": 1, "pipeline": [
                {"$documents": [{"start": "a"}]},
                {"$graphLookup": {"from": "c", "startWith": "$start", "connectFromField": "next",
                                  "connectToField": "name", "as": "chain"}},
                {"$project": {"n": {"$size": "$chain"}}},
            ], "cursor": {}})
            .await;
        common::first_batch(&reply)[0].get_i32("n").unwrap()
    };
    at_the_boundary!(f, 5_000, chain(), 3, 1);
}

/// `$lookup` (both forms) and `$unionWith` read the other collection through the same hiding:
/// a foreign document is joined until the instant it expires and never after.
#[tokio::test]
async fn lookup_and_union_with_never_see_expired_documents() {
    let f = Fixture::start().await;
    f.set_default_ttl(-1).await;
    f.coll
        .insert_many(vec![
            doc! {"_id": 1, "k": "a"},
            doc! {"_id": 2, "k": "a", "ttl": 5},
        ])
        .await
        .unwrap();
    let joined = |pipeline: Vec<Document>| {
        let f = &f;
        async move {
            let reply = f
                .run(doc! {"aggregate": 1, "pipeline": pipeline, "cursor": {}})
                .await;
            common::first_batch(&reply)[0].get_i32("n").unwrap()
        }
    };
    let equality = || {
        joined(vec![
            doc! {"$documents": [{"k": "a"}]},
            doc! {"$lookup": {"from": "c", "localField": "k", "foreignField": "k", "as": "j"}},
            doc! {"$project": {"n": {"$size": "$j"}}},
        ])
    };
    let correlated = || {
        joined(vec![
            doc! {"$documents": [{"k": "a"}]},
            doc! {"$lookup": {"from": "c", "let": {"k": "$k"}, "as": "j", "pipeline": [
                {"$match": {"$expr": {"$eq": ["$k", "$$k"]}}},
            ]}},
            doc! {"$project": {"n": {"$size": "$j"}}},
        ])
    };
    let union = || {
        joined(vec![
            doc! {"$documents": []},
            doc! {"$unionWith": "c"},
            doc! {"$count": "n"},
        ])
    };
    f.at(4_999);
    assert_eq!(equality().await, 2, "one millisecond before the expiry");
    assert_eq!(correlated().await, 2, "one millisecond before the expiry");
    assert_eq!(union().await, 2, "one millisecond before the expiry");
    f.at(5_000);
    assert_eq!(equality().await, 1, "at the expiry instant");
    assert_eq!(correlated().await, 1, "at the expiry instant");
    assert_eq!(union().await, 1, "at the expiry instant");
}

#[tokio::test]
async fn updates_deletes_and_find_and_modify_never_touch_expired_documents() {
    let f = Fixture::with_default_ttl().await;
    f.at(10_000);
    let update = f
        .coll
        .update_many(doc! {}, doc! {"$set": {"seen": true}})
        .await
        .unwrap();
    assert_eq!((update.matched_count, update.modified_count), (1, 1));
    let found = f
        .coll
        .find_one_and_update(doc! {"_id": "doomed"}, doc! {"$set": {"x": 1}})
        .await
        .unwrap();
    assert!(found.is_none());
    let deleted = f.coll.delete_many(doc! {"tag": "x"}).await.unwrap();
    assert_eq!(deleted.deleted_count, 0);
    assert!(f
        .coll
        .find_one_and_delete(doc! {"_id": "doomed"})
        .await
        .unwrap()
        .is_none());
    // The expired document was not modified: still as written, awaiting the reaper.
    let stored = f.stored("doomed").await.unwrap();
    assert!(stored.doc.get("seen").is_none() && stored.doc.get("x").is_none());
}

#[tokio::test]
async fn updates_at_the_boundary() {
    let f = Fixture::with_default_ttl().await;
    f.at(9_999);
    let update = f
        .coll
        .update_one(doc! {"_id": "doomed"}, doc! {"$inc": {"k": 1}})
        .await
        .unwrap();
    assert_eq!(update.matched_count, 1, "visible 1 ms before the expiry");
    // That write reset the countdown: the document now expires at 9.999 s + 10 s.
    f.at(19_998);
    assert_eq!(f.ids(doc! {"_id": "doomed"}).await, vec!["doomed"]);
    f.at(19_999);
    let update = f
        .coll
        .update_one(doc! {"_id": "doomed"}, doc! {"$inc": {"k": 1}})
        .await
        .unwrap();
    assert_eq!(update.matched_count, 0);
}

#[tokio::test]
async fn upsert_and_insert_replace_an_expired_document_atomically() {
    let f = Fixture::with_default_ttl().await;
    f.coll
        .create_index(
            IndexModel::builder()
                .keys(doc! {"tag": 1})
                .options(IndexOptions::builder().unique(true).build())
                .build(),
        )
        .await
        .unwrap();
    f.at(9_999);
    let blocked =
        f.db.run_command(doc! {"insert": "c", "documents": [{"_id": "doomed"}]})
            .await
            .unwrap();
    assert_eq!(
        blocked.get_i32("n"),
        Ok(0),
        "a live document still blocks its _id"
    );
    f.at(10_000);
    let upsert = f
        .coll
        .update_one(doc! {"_id": "doomed"}, doc! {"$set": {"fresh": 1}})
        .upsert(true)
        .await
        .unwrap();
    assert_eq!(upsert.upserted_id, Some(Bson::from("doomed")));
    let fresh = f
        .coll
        .find_one(doc! {"_id": "doomed"})
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        fresh,
        doc! {"_id": "doomed", "fresh": 1},
        "a fresh document, not the expired one updated"
    );

    // The fresh one expires in turn; then an insert reuses both its _id and its unique key.
    f.coll
        .update_one(doc! {"_id": "doomed"}, doc! {"$set": {"tag": "x"}})
        .await
        .unwrap();
    f.at(20_000);
    f.coll
        .insert_one(doc! {"_id": "doomed", "tag": "x", "v": 2})
        .await
        .unwrap();
    f.at(30_000);
    f.coll
        .insert_one(doc! {"_id": "other", "tag": "x"})
        .await
        .unwrap();
    assert_eq!(f.ids(doc! {"tag": "x"}).await, vec!["other"]);
    let stale =
        f.db.run_command(doc! {"insert": "c", "documents": [{"_id": "keeper"}]})
            .await
            .unwrap();
    assert_eq!(
        stale.get_array("writeErrors").unwrap().len(),
        1,
        "a document that never expires still blocks"
    );
}

#[tokio::test]
async fn per_document_ttl_overrides_and_invalid_values_are_ignored() {
    let f = Fixture::start().await;
    f.set_default_ttl(100).await;
    f.coll
        .insert_many(vec![
            doc! {"_id": "short", "ttl": 5},
            doc! {"_id": "long", "ttl": 1000_i64},
            doc! {"_id": "double", "ttl": 7.0},
            doc! {"_id": "never", "ttl": -1},
            doc! {"_id": "fraction", "ttl": 20.5},
            doc! {"_id": "string", "ttl": "5"},
            doc! {"_id": "zero", "ttl": 0},
            doc! {"_id": "plain"},
        ])
        .await
        .unwrap();
    f.at(5_000);
    assert!(!f.ids(doc! {}).await.contains(&"short".to_string()));
    f.at(7_000);
    assert!(!f.ids(doc! {}).await.contains(&"double".to_string()));
    f.at(100_000);
    assert_eq!(f.ids(doc! {}).await, vec!["long", "never"]);
    f.at(1_000_000);
    assert_eq!(f.ids(doc! {}).await, vec!["never"]);
    // $set / $unset of ttl change the override like any field.
    f.coll
        .insert_one(doc! {"_id": "later", "ttl": 3})
        .await
        .unwrap();
    f.coll
        .update_one(doc! {"_id": "later"}, doc! {"$unset": {"ttl": ""}})
        .await
        .unwrap();
    f.at(1_050_000);
    assert_eq!(
        f.ids(doc! {"_id": "later"}).await,
        vec!["later"],
        "back on the 100 s default"
    );
}

#[tokio::test]
async fn ttl_without_a_ts_index_has_no_effect_and_minus_one_default_means_own_ttl_only() {
    let f = Fixture::start().await;
    f.coll
        .insert_many(vec![doc! {"_id": "a", "ttl": 1}, doc! {"_id": "b"}])
        .await
        .unwrap();
    f.at(5_000);
    assert_eq!(f.ids(doc! {}).await, vec!["a", "b"]);
    f.set_default_ttl(-1).await;
    assert_eq!(
        f.ids(doc! {}).await,
        vec!["b"],
        "turning TTL on hides at once"
    );
    f.run(doc! {"dropIndexes": "c", "index": "_ts_1"}).await;
    assert_eq!(
        f.ids(doc! {}).await,
        vec!["b"],
        "dropping the policy never brings back what it expired"
    );
    f.coll
        .insert_one(doc! {"_id": "c", "ttl": 1})
        .await
        .unwrap();
    f.at(60_000);
    assert_eq!(
        f.ids(doc! {}).await,
        vec!["b", "c"],
        "without the policy, ttl is ignored again"
    );
}

#[tokio::test]
async fn clients_cannot_write_ts_and_meta_projection_reads_it() {
    let f = Fixture::with_default_ttl().await;
    let insert =
        f.db.run_command(doc! {"insert": "c", "documents": [{"_ts": 5}]})
            .await
            .unwrap();
    let error = insert.get_array("writeErrors").unwrap()[0]
        .as_document()
        .unwrap()
        .clone();
    assert_eq!(error.get_i32("code"), Ok(2));
    assert!(error
        .get_str("errmsg")
        .unwrap()
        .contains("_ts is maintained by the server"));
    for update in [
        doc! {"$set": {"_ts": 1}},
        doc! {"$rename": {"tag": "_ts"}},
        doc! {"_ts": 1},
    ] {
        let reply = f
            .run(doc! {"update": "c", "updates": [{"q": {"_id": "keeper"}, "u": update.clone()}]})
            .await;
        let code = reply.get_array("writeErrors").unwrap()[0]
            .as_document()
            .unwrap()
            .get_i32("code");
        assert_eq!(code, Ok(2), "{update}");
    }
    let plain = f
        .coll
        .find_one(doc! {"_id": "doomed"})
        .await
        .unwrap()
        .unwrap();
    assert!(
        plain.get("_ts").is_none(),
        "_ts is metadata, not part of the document"
    );
    f.at(2_500);
    let projected = f
        .coll
        .find_one(doc! {"_id": "doomed"})
        .projection(doc! {"_ts": {"$meta": "lastModified"}, "exp": {"$meta": "expireAt"}, "k": 1})
        .await
        .unwrap()
        .unwrap();
    assert_eq!(projected.get("_ts"), Some(&Bson::Int32((T0 / 1000) as i32)));
    assert_eq!(
        projected.get_datetime("exp").unwrap().timestamp_millis(),
        T0 + 10_000
    );
    let keeper = f
        .coll
        .find_one(doc! {"_id": "keeper"})
        .projection(doc! {"exp": {"$meta": "expireAt"}})
        .await
        .unwrap()
        .unwrap();
    assert_eq!(keeper.get("exp"), Some(&Bson::Null));
}

#[tokio::test]
async fn ts_index_validation_and_listing() {
    let f = Fixture::start().await;
    let create = |spec: Document| doc! {"createIndexes": "c", "indexes": [spec]};
    for bad in [
        Bson::Int32(0),
        Bson::Int32(-2),
        Bson::Int64(2_147_483_648),
        Bson::String("10".into()),
        Bson::Double(f64::NAN),
        Bson::Double(1.5),
    ] {
        let error = command_error(
            f.db.run_command(create(
                doc! {"key": {"_ts": 1}, "name": "_ts_1", "expireAfterSeconds": bad.clone()},
            ))
            .await,
        );
        assert_eq!(error.0, 67, "{bad}");
    }
    for bad in [
        doc! {"key": {"_ts": 1}, "name": "plain"},
        doc! {"key": {"_ts": 1, "a": 1}, "name": "compound", "expireAfterSeconds": 5},
    ] {
        let error = command_error(f.db.run_command(create(bad.clone())).await);
        assert_eq!(error.0, 67, "{bad}");
    }
    let created = f
        .run(create(
            doc! {"key": {"_ts": 1}, "name": "_ts_1", "expireAfterSeconds": 60},
        ))
        .await;
    assert_eq!(created.get_bool("createdCollectionAutomatically"), Ok(true));
    let listed = f.run(doc! {"listIndexes": "c"}).await;
    let specs = listed
        .get_document("cursor")
        .unwrap()
        .get_array("firstBatch")
        .unwrap()
        .clone();
    assert_eq!(
        specs[1],
        Bson::Document(doc! {"v": 2, "key": {"_ts": 1}, "name": "_ts_1", "expireAfterSeconds": 60})
    );
    let conflict = command_error(
        f.db.run_command(create(
            doc! {"key": {"_ts": 1}, "name": "_ts_1", "expireAfterSeconds": 30},
        ))
        .await,
    );
    assert_eq!(conflict.0, 85);
}

#[tokio::test]
async fn coll_mod_changes_the_default_at_once_without_rewriting() {
    let f = Fixture::start().await;
    f.set_default_ttl(3600).await;
    let docs: Vec<Document> = (0..100_000)
        .map(|i| doc! {"_id": format!("{i:06}"), "n": i})
        .collect();
    f.run(doc! {"insert": "c", "documents": docs, "ordered": false})
        .await;
    f.at(5_000);
    f.coll.insert_one(doc! {"_id": "later"}).await.unwrap();
    let before = f.stored("later").await.unwrap();
    f.at(20_000);
    assert_eq!(f.coll.estimated_document_count().await.unwrap(), 100_001);
    let reply = f
        .run(doc! {"collMod": "c", "index": {"keyPattern": {"_ts": 1}, "expireAfterSeconds": 20}})
        .await;
    assert_eq!(reply.get_i64("expireAfterSeconds_old"), Ok(3600));
    assert_eq!(reply.get_i64("expireAfterSeconds_new"), Ok(20));
    assert_eq!(
        f.coll.estimated_document_count().await.unwrap(),
        1,
        "every document written at T0 expired at once"
    );
    // What the change expired was deleted before the reply; the rest was not rewritten.
    assert!(f.stored("000042").await.is_none());
    assert_eq!(f.deleted_documents().await, 100_000);
    let after = f.stored("later").await.unwrap();
    assert_eq!(
        (after.rev, after.last_write_ms),
        (before.rev, before.last_write_ms),
        "no document was rewritten"
    );
    let invalid = command_error(
        f.db.run_command(
            doc! {"collMod": "c", "index": {"name": "_ts_1", "expireAfterSeconds": 0}},
        )
        .await,
    );
    assert_eq!(invalid.0, 72);
}

#[tokio::test]
async fn mongodb_ttl_indexes_on_date_fields() {
    let f = Fixture::start().await;
    let date = |ms: i64| Bson::DateTime(bson::DateTime::from_millis(ms));
    f.coll
        .insert_many(vec![
            doc! {"_id": "now", "at": date(T0)},
            doc! {"_id": "array", "at": [date(T0 + 50_000), date(T0 + 5_000)]},
            doc! {"_id": "number", "at": T0},
            doc! {"_id": "missing"},
            doc! {"_id": "other-kind", "at": date(T0), "kind": "keep"},
        ])
        .await
        .unwrap();
    let spec = doc! {"key": {"at": 1}, "name": "at_1", "expireAfterSeconds": 10.9, "partialFilterExpression": {"kind": {"$exists": false}}};
    f.run(doc! {"createIndexes": "c", "indexes": [spec]}).await;
    let listed = f.run(doc! {"listIndexes": "c"}).await;
    let at_index = listed
        .get_document("cursor")
        .unwrap()
        .get_array("firstBatch")
        .unwrap()[1]
        .as_document()
        .unwrap()
        .clone();
    assert_eq!(
        at_index.get("expireAfterSeconds"),
        Some(&Bson::Int32(10)),
        "stored as Int32, truncated"
    );
    at_the_boundary!(f, 10_000, async { f.ids(doc! {}).await.len() }, 5, 4);
    at_the_boundary!(f, 15_000, async { f.ids(doc! {}).await.len() }, 4, 3);
    // Unsorted: insertion order.
    assert_eq!(
        f.ids(doc! {}).await,
        vec!["number", "missing", "other-kind"]
    );
    let errors = [
        (
            doc! {"key": {"a": 1, "b": 1}, "name": "ab", "expireAfterSeconds": 5},
            67,
        ),
        (
            doc! {"key": {"w": 1}, "name": "w_1", "expireAfterSeconds": -1},
            67,
        ),
        (
            doc! {"key": {"w": 1}, "name": "w_1", "expireAfterSeconds": "5"},
            67,
        ),
        (
            doc! {"key": {"_id": 1}, "name": "_id_", "expireAfterSeconds": 5},
            197,
        ),
        (
            doc! {"key": {"at": 1}, "name": "at_1", "expireAfterSeconds": 99},
            85,
        ),
    ];
    for (spec, code) in errors {
        let error = command_error(
            f.db.run_command(doc! {"createIndexes": "c", "indexes": [spec.clone()]})
                .await,
        );
        assert_eq!(error.0, code, "{spec}");
    }
    // collMod converts a plain index to TTL and validates like mongod.
    f.run(doc! {"createIndexes": "c", "indexes": [{"key": {"w": 1}, "name": "w_1"}]})
        .await;
    let converted = f
        .run(doc! {"collMod": "c", "index": {"name": "w_1", "expireAfterSeconds": 30}})
        .await;
    assert!(converted.get("expireAfterSeconds_old").is_none());
    assert_eq!(converted.get_i64("expireAfterSeconds_new"), Ok(30));
    let cases = [
        (doc! {"name": "w_1", "expireAfterSeconds": -5}, 72),
        (doc! {"name": "w_1", "expireAfterSeconds": "x"}, 14),
        (doc! {"name": "_id_", "expireAfterSeconds": 5}, 72),
        (doc! {"name": "nope", "expireAfterSeconds": 5}, 27),
        (doc! {"expireAfterSeconds": 5}, 72),
        (doc! {"name": "w_1"}, 72),
    ];
    for (index, code) in cases {
        let error = command_error(
            f.db.run_command(doc! {"collMod": "c", "index": index.clone()})
                .await,
        );
        assert_eq!(error.0, code, "{index}");
    }
}

#[tokio::test]
async fn collection_statistics_exclude_expired_documents() {
    let f = Fixture::with_default_ttl().await;
    f.at(10_000);
    let coll_stats = f.run(doc! {"collStats": "c"}).await;
    assert_eq!(coll_stats.get_i64("count"), Ok(1));
    let db_stats = f.run(doc! {"dbStats": 1}).await;
    assert_eq!(db_stats.get_i64("objects"), Ok(1));
}

#[tokio::test]
async fn reaper_deletes_physically_and_reports() {
    let f = Fixture::with_default_ttl().await;
    f.coll
        .insert_one(doc! {"_id": "own", "ttl": 3})
        .await
        .unwrap();
    f.at(3_000);
    assert_eq!(f.ttl_pass().await, 1);
    assert!(f.stored("own").await.is_none());
    f.at(12_000);
    let status = f.run(doc! {"serverStatus": 1}).await;
    let pending = status
        .get_document("ttl")
        .unwrap()
        .get_document("ttl.c")
        .unwrap()
        .clone();
    assert_eq!(pending.get_i64("expiredPending"), Ok(1));
    assert_eq!(pending.get_i64("oldestExpiredAgeMillis"), Ok(2_000));
    assert!(pending.get_i64("lastPassMillis").is_ok());
    assert_eq!(
        pending.get("nextExpiryAt"),
        Some(&Bson::Null),
        "keeper never expires"
    );
    assert_eq!(f.ttl_pass().await, 1);
    assert!(f.stored("doomed").await.is_none());
    assert!(f.stored("keeper").await.is_some());
    let status = f.run(doc! {"serverStatus": 1}).await;
    let metrics = status
        .get_document("metrics")
        .unwrap()
        .get_document("ttl")
        .unwrap()
        .clone();
    assert_eq!(metrics.get_i64("deletedDocuments"), Ok(2));
    assert!(metrics.get_i64("passes").unwrap() >= 2);
    assert!(metrics.get_i64("subPasses").unwrap() >= 2);
    let after = status
        .get_document("ttl")
        .unwrap()
        .get_document("ttl.c")
        .unwrap()
        .clone();
    assert_eq!(after.get_i64("expiredPending"), Ok(0));
    f.coll.insert_one(doc! {"_id": "next"}).await.unwrap();
    let status = f.run(doc! {"serverStatus": 1}).await;
    let next = status
        .get_document("ttl")
        .unwrap()
        .get_document("ttl.c")
        .unwrap()
        .get_datetime("nextExpiryAt")
        .unwrap()
        .timestamp_millis();
    assert_eq!(next, T0 + 22_000);
}

#[tokio::test]
async fn test_commands_exist_only_when_enabled() {
    let plain = TestServer::start().await;
    let admin = plain.client().database("admin");
    for command in [doc! {"advanceClock": 5}, doc! {"runTtlPass": 1}] {
        let error = command_error(admin.run_command(command).await);
        assert_eq!(error.0, 59);
    }
    let f = Fixture::start().await;
    let admin = f.server.client().database("admin");
    let reply = admin.run_command(doc! {"advanceClock": 5}).await.unwrap();
    assert_eq!(
        reply.get_datetime("now").unwrap().timestamp_millis(),
        T0 + 5_000
    );
    assert_eq!(f.clock.now_ms(), T0 + 5_000);
    let params = admin
        .run_command(doc! {"getParameter": 1, "ttlMonitorSleepSecs": 1, "ttlMonitorEnabled": 1})
        .await
        .unwrap();
    assert_eq!(params.get_i32("ttlMonitorSleepSecs"), Ok(1));
    assert_eq!(params.get_bool("ttlMonitorEnabled"), Ok(false));
    let was = admin
        .run_command(doc! {"setParameter": 1, "ttlMonitorSleepSecs": 3})
        .await
        .unwrap();
    assert_eq!(was.get_i32("was"), Ok(1));
}

#[tokio::test]
async fn reaper_spares_a_document_rewritten_after_it_was_read() {
    let f = Fixture::with_default_ttl().await;
    f.at(10_000);
    let ns = Namespace::new("ttl", "c");
    let storage = f.server.state.storage.clone();
    let stale = storage
        .get(&ns, &Bson::from("doomed"))
        .await
        .unwrap()
        .unwrap();
    // A client rewrites the document between the reaper's scan and its delete.
    let rewrite = tideway_storage::WriteOp::Replace {
        replacement: true,
        id: Bson::from("doomed"),
        expected_rev: stale.rev,
        doc: doc! {"_id": "doomed", "k": 1, "rewritten": true},
        meta: tideway_storage::WriteMeta {
            last_write_ms: f.clock.now_ms(),
            ttl: tideway_storage::TtlClass::Default,
        },
        supersede: None,
    };
    let options = tideway_storage::WriteOptions {
        ordered: true,
        force_durable: false,
        background: false,
    };
    storage
        .write(&ns, vec![rewrite], options)
        .await
        .unwrap()
        .pop()
        .unwrap()
        .unwrap();
    let reaper_delete = tideway_storage::WriteOp::Delete {
        id: Bson::from("doomed"),
        expected_rev: Some(stale.rev),
    };
    let result = storage
        .write(&ns, vec![reaper_delete], options)
        .await
        .unwrap()
        .pop()
        .unwrap();
    assert_eq!(result, Err(tideway_storage::StorageError::WriteConflict));
    assert_eq!(
        f.ttl_pass().await,
        0,
        "the rewritten document is live again"
    );
    assert_eq!(f.ids(doc! {"rewritten": true}).await, vec!["doomed"]);
}

#[tokio::test]
async fn a_backlog_left_at_shutdown_is_reaped_after_restart() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(T0));
    let config = tideway::Config {
        storage: tideway::config::StorageKind::Disk,
        dbpath: dir.path().to_path_buf(),
        set_parameter: vec!["ttlMonitorEnabled=false".into()],
        ..common::test_config()
    };
    let server = TestServer::start_with_clock(config.clone(), clock.clone()).await;
    let coll = server.client().database("ttl").collection::<Document>("c");
    coll.insert_many(
        (0..500)
            .map(|i| doc! {"_id": i, "ttl": 1})
            .collect::<Vec<_>>(),
    )
    .await
    .unwrap();
    server.client().database("ttl").run_command(doc! {"createIndexes": "c", "indexes": [{"key": {"_ts": 1}, "name": "_ts_1", "expireAfterSeconds": -1}]}).await.unwrap();
    server.stop().await;
    clock.advance_ms(5_000);
    let server = TestServer::start_with_clock(config, clock.clone()).await;
    let deleted = server
        .state
        .reaper
        .run_once(server.state.storage.as_ref(), clock.now_ms())
        .await
        .unwrap();
    assert_eq!(deleted, 500);
    let stats = server
        .state
        .storage
        .stats(&Namespace::new("ttl", "c"))
        .await
        .unwrap();
    assert_eq!(stats.count, 0);
    server.stop().await;
}

/// Expiry is final: once a document has been reported expired, no later policy change brings it
/// back. Each change below would resurrect a document if it only changed visibility.
#[tokio::test]
async fn lowering_the_default_to_minus_one_never_resurrects_expired_documents() {
    let f = Fixture::with_default_ttl().await;
    // An invalid own ttl: the default applies.
    f.coll
        .insert_one(doc! {"_id": "invalid", "ttl": "x"})
        .await
        .unwrap();
    f.at(5_000);
    f.coll.insert_one(doc! {"_id": "young"}).await.unwrap();
    f.at(10_000);
    assert_eq!(f.ids(doc! {}).await, vec!["keeper", "young"]);
    f.run(doc! {"collMod": "c", "index": {"name": "_ts_1", "expireAfterSeconds": -1}})
        .await;
    assert_eq!(f.ids(doc! {}).await, vec!["keeper", "young"]);
    assert_eq!(f.deleted_documents().await, 2);
    // The change applies to documents alive at it: "young" now never expires.
    f.at(3_600_000);
    assert_eq!(f.ids(doc! {}).await, vec!["keeper", "young"]);
    assert_eq!(f.coll.count_documents(doc! {}).await.unwrap(), 2);
}

#[tokio::test]
async fn dropping_the_default_never_resurrects_expired_documents() {
    let f = Fixture::with_default_ttl().await;
    f.at(10_000);
    assert_eq!(f.ids(doc! {}).await, vec!["keeper"]);
    f.run(doc! {"dropIndexes": "c", "index": "_ts_1"}).await;
    assert_eq!(f.ids(doc! {}).await, vec!["keeper"]);
    assert!(f.stored("doomed").await.is_none());
    assert_eq!(f.deleted_documents().await, 1);
}

/// A collection with a TTL index on `at` (10 s) and two documents: "old" dated T0, "new" dated
/// T0 + 5 s.
async fn with_ttl_index() -> Fixture {
    let f = Fixture::start().await;
    f.run(doc! {"createIndexes": "c", "indexes": [{"key": {"at": 1}, "name": "at_1", "expireAfterSeconds": 10}]})
        .await;
    let date = |ms: i64| bson::DateTime::from_millis(T0 + ms);
    f.coll
        .insert_many([
            doc! {"_id": "old", "at": date(0)},
            doc! {"_id": "new", "at": date(5_000)},
        ])
        .await
        .unwrap();
    f
}

#[tokio::test]
async fn raising_or_dropping_a_ttl_index_never_resurrects_expired_documents() {
    let f = with_ttl_index().await;
    f.at(10_000);
    assert_eq!(f.ids(doc! {}).await, vec!["new"]);
    f.run(doc! {"collMod": "c", "index": {"name": "at_1", "expireAfterSeconds": 3600}})
        .await;
    assert_eq!(f.ids(doc! {}).await, vec!["new"]);
    assert_eq!(f.deleted_documents().await, 1);
    // "new" was alive at the change: it lives by the new value.
    f.at(3_604_999);
    assert_eq!(f.ids(doc! {}).await, vec!["new"]);
    f.at(3_605_000);
    assert!(f.ids(doc! {}).await.is_empty());

    let f = with_ttl_index().await;
    f.at(10_000);
    f.run(doc! {"dropIndexes": "c", "index": "at_1"}).await;
    assert_eq!(f.ids(doc! {}).await, vec!["new"]);
    f.at(3_600_000);
    assert_eq!(f.ids(doc! {}).await, vec!["new"]);
}

#[tokio::test]
async fn a_ttl_ddl_that_expires_documents_deletes_them_before_it_replies() {
    let f = Fixture::start().await;
    let date = bson::DateTime::from_millis(T0);
    f.coll
        .insert_many((0..50).map(|i| doc! {"_id": format!("d{i}"), "at": date}))
        .await
        .unwrap();
    f.at(60_000);
    // The monitor is off in this fixture: only the command itself can have deleted them.
    f.run(doc! {"createIndexes": "c", "indexes": [{"key": {"at": 1}, "name": "at_1", "expireAfterSeconds": 30}]})
        .await;
    assert_eq!(f.deleted_documents().await, 50);
    assert_eq!(f.coll.count_documents(doc! {}).await.unwrap(), 0);
    assert!(f.stored("d7").await.is_none());

    // Lowering the default with collMod: counters and counts agree when it replies.
    f.set_default_ttl(3600).await;
    f.coll
        .insert_many((0..20).map(|i| doc! {"_id": format!("e{i}")}))
        .await
        .unwrap();
    f.at(120_000);
    f.run(doc! {"collMod": "c", "index": {"name": "_ts_1", "expireAfterSeconds": 30}})
        .await;
    assert_eq!(f.deleted_documents().await, 70);
    assert_eq!(f.coll.count_documents(doc! {}).await.unwrap(), 0);
}

/// Only a collection with a default TTL in seconds keeps its documents ordered by last write
/// (docs/ttl.md, "Storage"). Setting a default on documents written without one — by
/// `createIndexes`, by `collMod` from -1, or again after dropping it — expires them by their
/// write times and reaps them, as if the order had always been kept.
#[tokio::test]
async fn a_default_set_after_the_writes_expires_and_reaps_them_by_their_write_times() {
    let f = Fixture::start().await;
    f.coll
        .insert_many((0..30).map(|i| doc! {"_id": format!("a{i}")}))
        .await
        .unwrap();
    f.at(20_000);
    f.coll.insert_one(doc! {"_id": "b"}).await.unwrap();
    f.at(40_000);
    f.set_default_ttl(30).await;
    assert_eq!(
        f.ids(doc! {}).await,
        vec!["b"],
        "written at T0: expired at T0 + 30 s"
    );
    f.ttl_pass().await;
    assert_eq!(f.deleted_documents().await, 30);
    assert!(f.stored("a7").await.is_none());
    f.at(50_000);
    assert_eq!(f.ttl_pass().await, 1, "b, written at T0 + 20 s");
    assert!(f.stored("b").await.is_none());

    f.run(doc! {"collMod": "c", "index": {"name": "_ts_1", "expireAfterSeconds": -1}})
        .await;
    f.coll
        .insert_many((0..10).map(|i| doc! {"_id": format!("c{i}")}))
        .await
        .unwrap();
    f.at(100_000);
    assert_eq!(f.ttl_pass().await, 0, "no default: nothing expires");
    f.run(doc! {"collMod": "c", "index": {"name": "_ts_1", "expireAfterSeconds": 30}})
        .await;
    f.ttl_pass().await;
    assert_eq!(f.deleted_documents().await, 41, "c*, written at T0 + 50 s");
    assert_eq!(f.coll.count_documents(doc! {}).await.unwrap(), 0);

    f.run(doc! {"dropIndexes": "c", "index": "_ts_1"}).await;
    f.coll.insert_one(doc! {"_id": "d"}).await.unwrap();
    f.at(200_000);
    f.set_default_ttl(60).await;
    f.ttl_pass().await;
    assert_eq!(f.deleted_documents().await, 42, "d, written at T0 + 100 s");
    assert!(f.stored("d").await.is_none());
}

#[tokio::test]
async fn the_server_clock_never_goes_back_across_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let config = tideway::Config {
        storage: tideway::config::StorageKind::Disk,
        dbpath: dir.path().to_path_buf(),
        set_parameter: vec!["ttlMonitorEnabled=false".into()],
        ..common::test_config()
    };
    let clock = Arc::new(ManualClock::new(T0));
    let server = TestServer::start_with_clock(config.clone(), clock.clone()).await;
    let db = server.client().database("ttl");
    db.run_command(doc! {"createIndexes": "c", "indexes": [{"key": {"_ts": 1}, "name": "_ts_1", "expireAfterSeconds": 10}]})
        .await
        .unwrap();
    let coll = db.collection::<Document>("c");
    coll.insert_one(doc! {"_id": 1}).await.unwrap();
    clock.advance_ms(10_000);
    assert_eq!(coll.count_documents(doc! {}).await.unwrap(), 0);
    server.stop().await;

    // The system clock stepped back an hour while the server was down.
    let stepped_back = Arc::new(ManualClock::new(T0 - 3_600_000));
    let server = TestServer::start_with_clock(config, stepped_back).await;
    assert!(server.state.clock.now_ms() >= T0 + 10_000);
    let coll = server.client().database("ttl").collection::<Document>("c");
    assert_eq!(coll.count_documents(doc! {}).await.unwrap(), 0);
    assert!(coll.find_one(doc! {"_id": 1}).await.unwrap().is_none());
    server.stop().await;
}
