//! Index builds: a build on a large collection proceeds in steps, so writes to other collections
//! are acknowledged while it runs; a unique build that meets a duplicate leaves nothing behind;
//! documents written during a build are indexed; `createIndexes` replies as mongod does.

mod common;

use bson::{doc, Document};
use common::TestServer;
use futures::TryStreamExt;

async fn load(db: &mongodb::Database, name: &str, count: i32, duplicate_at: Option<i32>) {
    let documents: Vec<Document> = (0..count)
        .map(|i| {
            let k = if Some(i) == duplicate_at { 7 } else { i };
            doc! {"_id": i, "k": k}
        })
        .collect();
    for chunk in documents.chunks(5_000) {
        db.collection::<Document>(name)
            .insert_many(chunk.to_vec())
            .await
            .unwrap();
    }
}

/// Starts building `{k: 1}` on `big` in the background.
fn build_k_index(
    db: &mongodb::Database,
) -> tokio::task::JoinHandle<mongodb::error::Result<Document>> {
    let db = db.clone();
    tokio::spawn(async move {
        db.run_command(doc! {"createIndexes": "big", "indexes": [{"key": {"k": 1}, "name": "k_1"}]})
            .await
    })
}

#[tokio::test]
async fn writes_to_other_collections_go_on_during_a_build() {
    let server = TestServer::start().await;
    let db = server.client().database("builds");
    load(&db, "big", 60_000, None).await;
    let build = build_k_index(&db);
    // Inserts into another collection while the build runs, one after the other: many are
    // acknowledged before it ends (a build that held the writer throughout would let at most
    // one through, racing the build's reply).
    let other = db.collection::<Document>("other");
    let mut during = 0;
    let mut i = 0;
    while !build.is_finished() {
        other.insert_one(doc! {"_id": i}).await.unwrap();
        i += 1;
        if !build.is_finished() {
            during += 1;
        }
    }
    let reply = build.await.unwrap().unwrap();
    assert_eq!(reply.get_i32("numIndexesBefore").unwrap(), 1);
    assert_eq!(reply.get_i32("numIndexesAfter").unwrap(), 2);
    assert!(!reply.get_bool("createdCollectionAutomatically").unwrap());
    // One insert could race the build's own reply; several in sequence cannot.
    assert!(
        during >= 5,
        "only {during} writes were acknowledged during the build"
    );
    eprintln!("{during} inserts acknowledged during the build");
    // The index is complete: a range reads exactly its keys.
    let explain = db
        .run_command(doc! {"explain": {"find": "big", "filter": {"k": {"$gte": 59_990}}}, "verbosity": "executionStats"})
        .await
        .unwrap();
    let stats = explain.get_document("executionStats").unwrap();
    assert_eq!(stats.get_i32("nReturned").unwrap(), 10);
    assert_eq!(stats.get_i32("totalKeysExamined").unwrap(), 10);
    let counted = db
        .collection::<Document>("big")
        .count_documents(doc! {"k": {"$gte": 0}})
        .await
        .unwrap();
    assert_eq!(counted, 60_000);
}

#[tokio::test]
async fn documents_written_during_a_build_are_indexed() {
    let server = TestServer::start().await;
    let db = server.client().database("builds");
    load(&db, "big", 30_000, None).await;
    let build = build_k_index(&db);
    let big = db.collection::<Document>("big");
    let mut written = 0;
    while !build.is_finished() || written < 50 {
        let id = 100_000 + written;
        big.insert_one(doc! {"_id": id, "k": id}).await.unwrap();
        // Moves a document already stored, possibly before the build reaches it.
        big.update_one(doc! {"_id": written}, doc! {"$set": {"k": -written - 1}})
            .await
            .unwrap();
        written += 1;
    }
    build.await.unwrap().unwrap();
    for (filter, expected) in [
        (doc! {"k": {"$gte": 100_000}}, written),
        (doc! {"k": {"$lt": 0}}, written),
        (doc! {"k": {"$gte": 0, "$lt": 100_000}}, 30_000 - written),
    ] {
        let hinted: Vec<Document> = big
            .find(filter.clone())
            .hint(mongodb::options::Hint::Name("k_1".into()))
            .await
            .unwrap()
            .try_collect()
            .await
            .unwrap();
        assert_eq!(hinted.len() as i32, expected, "{filter}");
    }
}

#[tokio::test]
async fn a_failed_unique_build_leaves_nothing_behind() {
    let server = TestServer::start().await;
    let db = server.client().database("builds");
    // The duplicate of k = 7 sits past the first build steps.
    load(&db, "dups", 20_000, Some(19_000)).await;
    let error = db
        .run_command(doc! {"createIndexes": "dups", "indexes": [{"key": {"k": 1}, "name": "k_1", "unique": true}]})
        .await
        .unwrap_err();
    let mongodb::error::ErrorKind::Command(command) = *error.kind else {
        panic!("expected a command error, got {error}");
    };
    assert_eq!(command.code, 11000);
    assert!(
        command.message.contains("dup key: { k: 7 }"),
        "{}",
        command.message
    );
    let indexes: Vec<String> = db
        .collection::<Document>("dups")
        .list_index_names()
        .await
        .unwrap();
    assert_eq!(indexes, vec!["_id_".to_string()]);
    let stats = db.run_command(doc! {"collStats": "dups"}).await.unwrap();
    assert_eq!(stats.get_i32("nindexes").unwrap(), 1);
    assert_eq!(stats.get_document("indexSizes").unwrap().len(), 1);
    // The name is free again, and a non-unique index builds.
    db.run_command(doc! {"createIndexes": "dups", "indexes": [{"key": {"k": 1}, "name": "k_1"}]})
        .await
        .unwrap();
    let sevens = db
        .collection::<Document>("dups")
        .count_documents(doc! {"k": 7})
        .await
        .unwrap();
    assert_eq!(sevens, 2);
}
