//! The catalog on PostgreSQL, with mongod's rules as the storage contract states them: create,
//! list, options, rename (within and across databases, onto an existing target), drop, drop
//! database; every change moves the catalog version. Needs `TIDEWAY_TEST_PG_URI`.

mod common;

use bson::doc;
use common::scratch;
use tideway_storage::conformance::index_spec;
use tideway_storage::{Namespace, StorageError};

fn names(metas: &[tideway_storage::CollectionMeta]) -> Vec<String> {
    metas.iter().map(|meta| meta.ns.coll.clone()).collect()
}

#[tokio::test]
async fn collections_are_created_listed_renamed_and_dropped_as_the_contract_says() {
    let Some(scratch) = scratch().await else {
        return;
    };
    let database = scratch.connect(2).await;
    let (a, b) = (Namespace::new("d1", "a"), Namespace::new("d1", "b"));
    let version = database.catalog_version().await.unwrap();

    let created = database
        .create_collection(
            &b,
            doc! {"capped": true, "size": 4096},
            vec![index_spec("x_1", &[("x", 1)], false, false, None)],
        )
        .await
        .unwrap();
    assert_eq!(
        created
            .indexes
            .iter()
            .map(|index| index.name.as_str())
            .collect::<Vec<_>>(),
        ["_id_", "x_1"]
    );
    database
        .create_collection(&a, doc! {}, Vec::new())
        .await
        .unwrap();
    assert!(database.catalog_version().await.unwrap() > version);
    assert!(matches!(
        database.create_collection(&a, doc! {}, Vec::new()).await,
        Err(StorageError::NamespaceExists(ns)) if ns == a
    ));
    assert_eq!(
        names(&database.list_collections("d1").await.unwrap()),
        ["a", "b"]
    );
    let found = database.collection(&b).await.unwrap().unwrap();
    assert_eq!(
        (found.uuid, found.options.clone()),
        (created.uuid, doc! {"capped": true, "size": 4096})
    );
    assert_eq!(found.indexes.len(), 2);

    database
        .set_collection_options(&a, doc! {"validator": {"x": 1}})
        .await
        .unwrap();
    assert_eq!(
        database.collection(&a).await.unwrap().unwrap().options,
        doc! {"validator": {"x": 1}}
    );
    assert!(matches!(
        database
            .set_collection_options(
                &a,
                doc! {"clusteredIndex": {"key": {"_id": 1}, "unique": true}}
            )
            .await,
        Err(StorageError::InvalidIndex(_))
    ));
    assert!(matches!(
        database
            .set_collection_options(&Namespace::new("d1", "missing"), doc! {})
            .await,
        Err(StorageError::NamespaceNotFound(_))
    ));

    // Rename: onto an existing target only with drop_target; across databases keeps the uuid.
    assert!(matches!(
        database.rename_collection(&a, &b, false).await,
        Err(StorageError::NamespaceExists(ns)) if ns == b
    ));
    assert!(matches!(
        database.rename_collection(&a, &a, false).await,
        Err(StorageError::NamespaceExists(_))
    ));
    let a_uuid = database.collection(&a).await.unwrap().unwrap().uuid;
    database.rename_collection(&a, &b, true).await.unwrap();
    assert_eq!(
        names(&database.list_collections("d1").await.unwrap()),
        ["b"]
    );
    let renamed = database.collection(&b).await.unwrap().unwrap();
    assert_eq!(
        (renamed.uuid, renamed.indexes.len()),
        (a_uuid, 1),
        "the source replaced the target"
    );
    let elsewhere = Namespace::new("d2", "c");
    database
        .rename_collection(&b, &elsewhere, false)
        .await
        .unwrap();
    assert!(database.list_collections("d1").await.unwrap().is_empty());
    assert_eq!(
        database.collection(&elsewhere).await.unwrap().unwrap().uuid,
        a_uuid
    );
    assert!(matches!(
        database.rename_collection(&b, &a, false).await,
        Err(StorageError::NamespaceNotFound(ns)) if ns == b
    ));

    // Drops.
    assert!(database.drop_collection(&elsewhere).await.unwrap());
    assert!(!database.drop_collection(&elsewhere).await.unwrap());
    for coll in ["p", "q"] {
        database
            .create_collection(&Namespace::new("d3", coll), doc! {}, Vec::new())
            .await
            .unwrap();
    }
    database
        .create_collection(&Namespace::new("d4", "r"), doc! {}, Vec::new())
        .await
        .unwrap();
    database.drop_database("d3").await.unwrap();
    assert!(database.list_collections("d3").await.unwrap().is_empty());
    assert_eq!(
        names(&database.list_collections("d4").await.unwrap()),
        ["r"]
    );
    scratch.drop_database().await;
}

#[tokio::test]
async fn a_drop_removes_the_collections_documents_and_index_entries_with_it() {
    let Some(scratch) = scratch().await else {
        return;
    };
    // Two connections: the test holds one while the drop takes the other.
    let database = scratch.connect(2).await;
    let ns = Namespace::new("d", "c");
    database
        .create_collection(
            &ns,
            doc! {},
            vec![index_spec("x_1", &[("x", 1)], false, false, None)],
        )
        .await
        .unwrap();
    let client = database.client().await.unwrap();
    let (coll_id, entry): (i64, Vec<u8>) = {
        let row = client
            .query_one("SELECT id, entry FROM tideway.collections", &[])
            .await
            .unwrap();
        (row.get(0), row.get(1))
    };
    let index_id = tideway_storage::catalog_doc::decode(coll_id as u64, &entry)
        .unwrap()
        .indexes[0]
        .id as i64;
    // Rows as the write path will store them (until it exists, written by hand).
    client
        .execute(
            "INSERT INTO tideway.documents VALUES ($1, '\\x10', 1, 1, 0, 0, 0, '\\x05000000')",
            &[&coll_id],
        )
        .await
        .unwrap();
    client
        .execute(
            "INSERT INTO tideway.index_entries VALUES ($1, '\\x20', '\\x10', NULL)",
            &[&index_id],
        )
        .await
        .unwrap();
    assert!(database.drop_collection(&ns).await.unwrap());
    for table in ["documents", "index_entries", "collections"] {
        let left: i64 = client
            .query_one(&format!("SELECT count(*) FROM tideway.{table}"), &[])
            .await
            .unwrap()
            .get(0);
        assert_eq!(left, 0, "{table}");
    }
    scratch.drop_database().await;
}
