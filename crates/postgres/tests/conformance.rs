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
    let storage = PgStorage::open_with_rule(&scratch.uri, 4, conformance::rule_by_option)
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
    let open = |rule| PgStorage::open_with_rule(&scratch.uri, 4, rule);
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
