//! Nodes sharing one database: each node's heartbeat row and the reaper lease of each
//! collection. One live node holds a collection's lease; a node whose heartbeat stopped (a
//! crash) or that left (a shutdown) loses its leases to the next node that asks; a dropped
//! collection's lease goes with it. Needs `TIDEWAY_TEST_PG_URI` (see `bootstrap.rs`).

mod common;

use bson::doc;
use common::scratch;
use tideway_postgres::PgStorage;
use tideway_storage::{Namespace, Storage};
use tokio_postgres::NoTls;

/// A node on `uri` that has joined the others; its id.
async fn node(uri: &str, address: &str) -> (PgStorage, String) {
    let storage = PgStorage::open(uri, 4).await.unwrap();
    let nodes = storage
        .join(address)
        .await
        .unwrap()
        .expect("a shared engine");
    let id = nodes.get_str("thisNode").unwrap().to_owned();
    (storage, id)
}

fn sorted(mut namespaces: Vec<Namespace>) -> Vec<Namespace> {
    namespaces.sort_by_key(|ns| ns.to_string());
    namespaces
}

#[tokio::test]
async fn a_collections_reaper_lease_stays_with_a_live_node_and_passes_from_a_dead_one() {
    let Some(scratch) = scratch().await else {
        return;
    };
    let (sql, connection) = tokio_postgres::connect(&scratch.uri, NoTls).await.unwrap();
    tokio::spawn(connection);
    let (first, first_id) = node(&scratch.uri, "first:1").await;
    let (second, second_id) = node(&scratch.uri, "second:1").await;
    let (sessions, events) = (
        Namespace::new("app", "sessions"),
        Namespace::new("app", "events"),
    );
    for ns in [&sessions, &events] {
        first
            .create_collection(ns, doc! {}, Vec::new())
            .await
            .unwrap();
    }
    let both = sorted(vec![events.clone(), sessions.clone()]);

    // The first to ask takes both; the other gets none while the holder is live.
    assert_eq!(
        sorted(first.reaper_leases(both.clone()).await.unwrap()),
        both
    );
    assert_eq!(second.reaper_leases(both.clone()).await.unwrap(), []);
    assert_eq!(
        sorted(first.reaper_leases(both.clone()).await.unwrap()),
        both,
        "kept"
    );

    // A node joining now finds every node, live, and who holds which lease.
    let (third, third_id) = node(&scratch.uri, "third:1").await;
    let status = third.status().expect("a status").1;
    let nodes = status.get_document("nodes").unwrap();
    assert_eq!(nodes.get_str("thisNode").unwrap(), third_id);
    let members = nodes.get_array("members").unwrap();
    let member = |id: &str| {
        members
            .iter()
            .filter_map(|member| member.as_document())
            .find(|member| member.get_str("id") == Ok(id))
            .unwrap_or_else(|| panic!("{id} in {members:?}"))
            .clone()
    };
    let leases = |id: &str| -> Vec<String> {
        member(id)
            .get_array("reaperLeases")
            .unwrap()
            .iter()
            .filter_map(|ns| ns.as_str().map(str::to_owned))
            .collect()
    };
    for id in [&first_id, &second_id, &third_id] {
        assert!(member(id).get_bool("live").unwrap(), "{id}");
    }
    assert_eq!(member(&first_id).get_str("address").unwrap(), "first:1");
    assert_eq!(leases(&first_id), ["app.events", "app.sessions"]);
    assert!(leases(&second_id).is_empty());

    // The first node dies: its heartbeat stops (the process is gone) and ages past the limit.
    // Its task may still be writing one last beat as it goes, which would make it live again:
    // age it once more then.
    drop(first);
    let mut taken = Vec::new();
    for _ in 0..3 {
        sql.execute(
            "UPDATE tideway.nodes SET heartbeat_ms = heartbeat_ms - $2 WHERE id = $1",
            &[&first_id, &(tideway_postgres::LIVE_FOR_MS + 1_000)],
        )
        .await
        .unwrap();
        taken = second.reaper_leases(both.clone()).await.unwrap();
        if !taken.is_empty() {
            break;
        }
    }
    assert_eq!(sorted(taken), both, "a dead holder's leases pass on");

    // A node that leaves gives its leases up at once.
    assert_eq!(third.reaper_leases(both.clone()).await.unwrap(), []);
    second.leave().await.unwrap();
    assert_eq!(
        sorted(third.reaper_leases(both.clone()).await.unwrap()),
        both
    );
    let rows: i64 = sql
        .query_one(
            "SELECT count(*) FROM tideway.nodes WHERE id = $1",
            &[&second_id],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(rows, 0, "a node that left has no row");

    // A dropped collection's lease goes with it.
    third.drop_collection(&events).await.unwrap();
    let leases: i64 = sql
        .query_one("SELECT count(*) FROM tideway.reaper_leases", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(leases, 1);
    drop((sql, third));
    scratch.drop_database().await;
}
