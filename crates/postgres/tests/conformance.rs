//! The storage conformance suite (`tideway_storage::conformance`, the same checks the redb
//! engine passes) against the PostgreSQL engine. Needs `TIDEWAY_TEST_PG_URI`.

mod common;

use tideway_postgres::PgStorage;
use tideway_storage::conformance;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_storage_contract_holds_on_postgresql() {
    let Some(scratch) = common::scratch().await else {
        return;
    };
    let storage = PgStorage::open(&scratch.uri, 8)
        .await
        .unwrap_or_else(|error| panic!("{error}"));
    conformance::run_all(&storage).await;
    drop(storage);
    scratch.drop_database().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_last_write_rule_holds_on_postgresql() {
    let Some(scratch) = common::scratch().await else {
        return;
    };
    let storage = PgStorage::open_with_rule(&scratch.uri, 4, None, conformance::rule_by_option, 0)
        .await
        .unwrap_or_else(|error| panic!("{error}"));
    conformance::last_write_rule(&storage).await;
    drop(storage);
    scratch.drop_database().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn opening_applies_the_last_write_rule() {
    use bson::{doc, Bson};
    use tideway_storage::{ExpiryOrder, Namespace, Storage, TtlClass};
    let Some(scratch) = common::scratch().await else {
        return;
    };
    let kept = Namespace::new("rule", "kept");
    let unkept = Namespace::new("rule", "unkept");
    async fn last_write_ids(storage: &PgStorage, ns: &Namespace) -> Vec<Bson> {
        let all = (std::ops::Bound::Unbounded, std::ops::Bound::Unbounded);
        conformance::expiry_all(storage, ns, ExpiryOrder::LastWrite, all, 10)
            .await
            .iter()
            .map(|record| record.doc.get("_id").cloned().unwrap_or(Bson::Null))
            .collect()
    }
    let open = |rule| PgStorage::open_with_rule(&scratch.uri, 4, None, rule, 0);
    let both = [Bson::Int32(2), Bson::Int32(1)];
    {
        let storage = open(tideway_storage::every_collection).await.unwrap();
        storage
            .create_collection(
                &kept,
                doc! {conformance::LAST_WRITE_OPTION: true},
                Vec::new(),
            )
            .await
            .unwrap();
        for ns in [&kept, &unkept] {
            let insert = |id: i32, at: i64| {
                conformance::insert_with(
                    doc! {"_id": id},
                    conformance::meta(at, TtlClass::Default),
                    None,
                )
            };
            conformance::write_ok(&storage, ns, vec![insert(1, 20), insert(2, 10)]).await;
            assert_eq!(last_write_ids(&storage, ns).await, both);
        }
    }
    {
        // Another rule at the next start: the collection it no longer selects leaves the order.
        let storage = open(conformance::rule_by_option).await.unwrap();
        assert_eq!(last_write_ids(&storage, &kept).await, both);
        assert!(last_write_ids(&storage, &unkept).await.is_empty());
        assert_eq!(
            storage
                .get(&unkept, &Bson::Int32(1))
                .await
                .unwrap()
                .unwrap()
                .ttl,
            TtlClass::Default,
            "a document out of the order keeps its class"
        );
    }
    let storage = open(tideway_storage::every_collection).await.unwrap();
    assert_eq!(last_write_ids(&storage, &unkept).await, both);
    drop(storage);
    scratch.drop_database().await;
}

/// Concurrent single-document inserts share statements (`serverStatus.postgres.insertGroups`)
/// and each still gets its own outcome, refusals included (the conformance check).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_single_inserts_are_written_in_groups() {
    use bson::doc;
    use tideway_storage::{Namespace, Storage};
    let Some(scratch) = common::scratch().await else {
        return;
    };
    let storage = PgStorage::open(&scratch.uri, 8)
        .await
        .unwrap_or_else(|error| panic!("{error}"));
    conformance::concurrent_single_writes(&storage).await;
    // The collection exists first: concurrent creations would take turns.
    let ns = Namespace::new("grouped", "c");
    storage
        .write(
            &ns,
            vec![conformance::insert(doc! {"_id": -1})],
            conformance::ORDERED,
        )
        .await
        .unwrap();
    let inserts = (0..64).map(|id| {
        let storage = &storage;
        let ns = &ns;
        async move {
            storage
                .write(
                    ns,
                    vec![conformance::insert(doc! {"_id": id})],
                    conformance::ORDERED,
                )
                .await
        }
    });
    for result in futures::future::join_all(inserts).await {
        assert!(matches!(result.as_deref(), Ok([Ok(_)])), "{result:?}");
    }
    let all = conformance::scan_all(
        &storage,
        &ns,
        tideway_storage::ScanSource::Collection,
        false,
        100,
    )
    .await;
    assert_eq!(all.len(), 65);
    let status = storage.database().status();
    let groups = status.get_document("insertGroups").unwrap();
    let (groups, inserts) = (
        groups.get_i64("groups").unwrap(),
        groups.get_i64("inserts").unwrap(),
    );
    assert!(
        inserts > groups,
        "some statement wrote more than one insert: {groups} groups, {inserts} inserts"
    );
    drop(storage);
    scratch.drop_database().await;
}
