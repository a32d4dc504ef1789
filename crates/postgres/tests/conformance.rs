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
