//! Several tideway nodes on one PostgreSQL database (issue 27): a catalog change one node makes
//! binds the next command on every other node — a unique index, a drop, a validator, a dropped
//! index, a collection created elsewhere — and writes that race a change on another node never
//! leave an index without their entries. Needs `TIDEWAY_TEST_PG_URI` (required under `CI=true`).

mod common;

use bson::{doc, Document};
use mongodb::Collection;

use common::{command_error, TestServer};

/// Two nodes on one fresh database, and the same collection through each.
async fn two_nodes(
    coll: &str,
) -> Option<(
    TestServer,
    TestServer,
    Collection<Document>,
    Collection<Document>,
)> {
    let config = common::postgres_config().await?;
    let first = TestServer::start_with(config.clone()).await;
    let second = TestServer::start_with(config).await;
    let on_first = first.client().database("app").collection(coll);
    let on_second = second.client().database("app").collection(coll);
    Some((first, second, on_first, on_second))
}

/// A unique ascending index on `field`.
fn unique_index(field: &str) -> mongodb::IndexModel {
    mongodb::IndexModel::builder()
        .keys(doc! {field: 1})
        .options(
            mongodb::options::IndexOptions::builder()
                .unique(true)
                .build(),
        )
        .build()
}

/// The write error code of a failed insert.
fn write_error_code(result: mongodb::error::Result<impl std::fmt::Debug>) -> i32 {
    match *result.expect_err("the write fails").kind {
        mongodb::error::ErrorKind::Write(mongodb::error::WriteFailure::WriteError(ref error)) => {
            error.code
        }
        ref other => panic!("expected a write error, got {other:?}"),
    }
}

#[tokio::test]
async fn a_unique_index_made_on_one_node_binds_the_next_insert_on_another() {
    let Some((_first, _second, on_first, on_second)) = two_nodes("users").await else {
        return;
    };
    // The second node has the collection cached, without the index.
    on_second
        .insert_one(doc! {"_id": 1, "email": "ada@example.com"})
        .await
        .unwrap();
    on_second.find_one(doc! {"_id": 1}).await.unwrap();
    on_first.create_index(unique_index("email")).await.unwrap();
    let duplicate = on_second
        .insert_one(doc! {"_id": 2, "email": "ada@example.com"})
        .await;
    assert_eq!(write_error_code(duplicate), 11000);
    // The second node plans with the index too: a hint on it works there.
    let hinted = on_second
        .find(doc! {"email": "ada@example.com"})
        .hint(mongodb::options::Hint::Keys(doc! {"email": 1}))
        .await
        .unwrap();
    let found: Vec<Document> = futures::TryStreamExt::try_collect(hinted).await.unwrap();
    assert_eq!(found.len(), 1);
    let names = on_second.list_index_names().await.unwrap();
    assert!(names.contains(&"email_1".to_string()), "{names:?}");
}

#[tokio::test]
async fn a_validator_set_on_one_node_binds_the_next_insert_on_another() {
    let Some((first, _second, _on_first, on_second)) = two_nodes("events").await else {
        return;
    };
    on_second.insert_one(doc! {"kind": "click"}).await.unwrap();
    first
        .client()
        .database("app")
        .run_command(doc! {
            "collMod": "events",
            "validator": {"kind": {"$type": "string"}},
        })
        .await
        .unwrap();
    let refused = on_second.insert_one(doc! {"kind": 7}).await;
    assert_eq!(write_error_code(refused), 121, "DocumentValidationFailure");
    on_second.insert_one(doc! {"kind": "view"}).await.unwrap();
}

#[tokio::test]
async fn a_collection_dropped_and_made_again_on_one_node_is_seen_by_the_next_command_on_another() {
    let Some((_first, _second, on_first, on_second)) = two_nodes("carts").await else {
        return;
    };
    on_second.insert_one(doc! {"_id": 1, "v": 1}).await.unwrap();
    assert_eq!(on_second.count_documents(doc! {}).await.unwrap(), 1);
    on_first.drop().await.unwrap();
    assert_eq!(on_second.count_documents(doc! {}).await.unwrap(), 0);
    assert!(on_second.find_one(doc! {"_id": 1}).await.unwrap().is_none());
    // Made again on the first node: the second finds its documents, not the old collection's
    // absence or its old id.
    on_first.insert_one(doc! {"_id": 2, "v": 2}).await.unwrap();
    let found = on_second.find_one(doc! {"_id": 2}).await.unwrap();
    assert_eq!(found, Some(doc! {"_id": 2, "v": 2}));
    // A write on the second node lands in the new collection, never in the dropped one.
    on_first.drop().await.unwrap();
    on_second.insert_one(doc! {"_id": 3}).await.unwrap();
    let all: Vec<Document> =
        futures::TryStreamExt::try_collect(on_first.find(doc! {}).await.unwrap())
            .await
            .unwrap();
    assert_eq!(all, vec![doc! {"_id": 3}]);
}

#[tokio::test]
async fn an_index_dropped_on_one_node_is_not_used_by_the_next_query_on_another() {
    let Some((_first, _second, on_first, on_second)) = two_nodes("orders").await else {
        return;
    };
    on_first
        .create_index(
            mongodb::IndexModel::builder()
                .keys(doc! {"customer": 1})
                .build(),
        )
        .await
        .unwrap();
    on_second
        .insert_many((0..20).map(|i| doc! {"_id": i, "customer": i % 4}))
        .await
        .unwrap();
    let hinted = on_second
        .count_documents(doc! {"customer": 1})
        .hint(mongodb::options::Hint::Keys(doc! {"customer": 1}))
        .await
        .unwrap();
    assert_eq!(hinted, 5);
    on_first.drop_index("customer_1").await.unwrap();
    // Planned with the dropped index, the query would find no entries and answer 0.
    assert_eq!(
        on_second
            .count_documents(doc! {"customer": 1})
            .await
            .unwrap(),
        5
    );
    let (code, _, message) = command_error(
        on_second
            .count_documents(doc! {"customer": 1})
            .hint(mongodb::options::Hint::Keys(doc! {"customer": 1}))
            .await,
    );
    assert_eq!(code, 2, "{message}");
    let names = on_second.list_index_names().await.unwrap();
    assert_eq!(names, vec!["_id_".to_string()]);
}

#[tokio::test]
async fn inserts_racing_an_index_build_on_another_node_all_get_entries() {
    let Some((_first, _second, on_first, on_second)) = two_nodes("readings").await else {
        return;
    };
    on_second
        .insert_one(doc! {"_id": -1, "sensor": -1})
        .await
        .unwrap();
    let writer = {
        let on_second = on_second.clone();
        tokio::spawn(async move {
            for i in 0..400 {
                on_second
                    .insert_one(doc! {"_id": i, "sensor": i})
                    .await
                    .unwrap();
            }
        })
    };
    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    on_first.create_index(unique_index("sensor")).await.unwrap();
    writer.await.unwrap();
    // Every document is in the index: a scan of it counts them all, and each sensor value is
    // taken for a second insert.
    let total = on_first.count_documents(doc! {}).await.unwrap();
    assert_eq!(total, 401);
    let through_index = on_first
        .count_documents(doc! {"sensor": {"$gte": -1}})
        .hint(mongodb::options::Hint::Keys(doc! {"sensor": 1}))
        .await
        .unwrap();
    assert_eq!(
        through_index, total,
        "documents written during the build lack entries"
    );
    for sensor in [0, 200, 399] {
        let duplicate = on_first
            .insert_one(doc! {"_id": 1000 + sensor, "sensor": sensor})
            .await;
        assert_eq!(write_error_code(duplicate), 11000, "sensor {sensor}");
    }
}

#[tokio::test]
async fn a_cursor_goes_on_after_a_catalog_change_on_another_node() {
    let Some((_first, second, on_first, on_second)) = two_nodes("logs").await else {
        return;
    };
    on_second
        .insert_many((0..5).map(|i| doc! {"_id": i}))
        .await
        .unwrap();
    let db = second.client().database("app");
    let opened = db
        .run_command(doc! {"find": "logs", "batchSize": 2})
        .await
        .unwrap();
    let cursor = opened.get_document("cursor").unwrap();
    let id = cursor.get_i64("id").unwrap();
    assert_eq!(cursor.get_array("firstBatch").unwrap().len(), 2);
    // Any catalog change on the other node moves the database's catalog version.
    on_first
        .create_index(mongodb::IndexModel::builder().keys(doc! {"at": 1}).build())
        .await
        .unwrap();
    let more = db
        .run_command(doc! {"getMore": id, "collection": "logs"})
        .await
        .unwrap();
    let next = more.get_document("cursor").unwrap();
    assert_eq!(next.get_array("nextBatch").unwrap().len(), 3, "{more}");
}

/// `serverStatus.postgres.nodes` of a node.
async fn nodes_status(server: &TestServer) -> Document {
    let status = server.server_status().await;
    status
        .get_document("postgres")
        .and_then(|postgres| postgres.get_document("nodes"))
        .unwrap_or_else(|_| panic!("serverStatus.postgres.nodes in {status:?}"))
        .clone()
}

#[tokio::test]
async fn server_status_names_every_node_on_the_database_and_the_clock_offset() {
    let Some((first, second, _, _)) = two_nodes("unused").await else {
        return;
    };
    let (on_first, on_second) = (nodes_status(&first).await, nodes_status(&second).await);
    let first_id = on_first.get_str("thisNode").unwrap();
    let second_id = on_second.get_str("thisNode").unwrap();
    assert_ne!(first_id, second_id);
    // The second joined after the first: its view from joining has both, live.
    let members = on_second.get_array("members").unwrap();
    for id in [first_id, second_id] {
        let member = members
            .iter()
            .filter_map(|member| member.as_document())
            .find(|member| member.get_str("id") == Ok(id))
            .unwrap_or_else(|| panic!("{id} in {members:?}"));
        assert_eq!(member.get_bool("live"), Ok(true), "{member:?}");
        assert!(member.get_i64("clockOffsetMillis").is_ok(), "{member:?}");
    }
    // The database server runs on this machine: the offset is about 0.
    let offset = on_second.get_i64("clockOffsetMillis").unwrap();
    assert!(offset.abs() < 1_000, "{on_second:?}");
}

#[tokio::test]
async fn a_node_whose_own_clock_reads_an_hour_off_judges_expiry_by_the_database() {
    let Some(config) = common::postgres_config().await else {
        return;
    };
    // Both nodes on the database's clock (as `tideway` runs them), one of them reading its
    // own system clock an hour ahead.
    let start = |config: tideway::Config| async move {
        let (storage, clock) = tideway::state::open_storage_and_clock(&config)
            .await
            .unwrap();
        TestServer::start_with_storage(config, clock, storage).await
    };
    let skewed = tideway::Config {
        test_clock_skew_ms: 3_600_000,
        enable_test_commands: true,
        ..config.clone()
    };
    let (exact, ahead) = (start(config).await, start(skewed).await);
    let on_exact = exact
        .client()
        .database("app")
        .collection::<Document>("sessions");
    let on_ahead = ahead
        .client()
        .database("app")
        .collection::<Document>("sessions");
    on_exact
        .create_index(
            mongodb::IndexModel::builder()
                .keys(doc! {"_ts": 1})
                .options(
                    mongodb::options::IndexOptions::builder()
                        .expire_after(std::time::Duration::from_secs(3_600))
                        .build(),
                )
                .build(),
        )
        .await
        .unwrap();
    // Half an hour to live: by the database's clock alive, by the skewed node's own clock
    // (an hour ahead) long expired. Written through either node, alive on both.
    on_exact
        .insert_one(doc! {"_id": "by-exact", "ttl": 1_800})
        .await
        .unwrap();
    on_ahead
        .insert_one(doc! {"_id": "by-ahead", "ttl": 1_800})
        .await
        .unwrap();
    for (node, collection) in [("exact", &on_exact), ("ahead", &on_ahead)] {
        let mut ids: Vec<String> = futures::TryStreamExt::try_collect::<Vec<Document>>(
            collection.find(doc! {}).await.unwrap(),
        )
        .await
        .unwrap()
        .iter()
        .map(|found| found.get_str("_id").unwrap().to_owned())
        .collect();
        ids.sort();
        assert_eq!(ids, ["by-ahead", "by-exact"], "on the {node} node");
    }
    // Both report the database's time, not an hour apart.
    let local_time =
        |status: Document| status.get_datetime("localTime").unwrap().timestamp_millis();
    let apart = local_time(ahead.server_status().await) - local_time(exact.server_status().await);
    assert!(apart.abs() < 60_000, "{apart} ms apart");
}
