//! Databases, collections and indexes: DDL commands and their mongod reply shapes.

mod common;

use bson::{doc, Bson, Document};
use common::{command_error, first_batch, TestServer};
use mongodb::options::IndexOptions;
use mongodb::IndexModel;

async fn run(db: &mongodb::Database, command: Document) -> Document {
    db.run_command(command).await.expect("command succeeds")
}

#[tokio::test]
async fn collections_are_created_implicitly_and_explicitly() {
    let server = TestServer::start().await;
    let client = server.client();
    let db = client.database("shop");
    db.collection::<Document>("orders")
        .insert_one(doc! {"x": 1})
        .await
        .unwrap();
    run(&db, doc! {"create": "items"}).await;
    run(&db, doc! {"create": "items"}).await;
    let conflict = command_error(
        db.run_command(doc! {"create": "orders", "idIndex": {"key": {"_id": 1}, "name": "_id_"}})
            .await,
    );
    assert_eq!((conflict.0, conflict.1.as_str()), (48, "NamespaceExists"));
    let unsupported = command_error(
        db.run_command(doc! {"create": "secret", "encryptedFields": {"fields": []}})
            .await,
    );
    assert_eq!(unsupported.0, 238);
    let ttl = command_error(
        db.run_command(doc! {"create": "t", "expireAfterSeconds": 5})
            .await,
    );
    assert_eq!(ttl.0, 72);

    let mut names = db.list_collection_names().await.unwrap();
    names.sort();
    assert_eq!(names, vec!["items", "orders"]);

    let listed = run(
        &db,
        doc! {"listCollections": 1, "filter": {"name": "orders"}},
    )
    .await;
    let entries = first_batch(&listed);
    assert_eq!(entries.len(), 1);
    let entry = &entries[0];
    assert_eq!(entry.get_str("type"), Ok("collection"));
    assert!(entry.get_document("options").unwrap().is_empty());
    let info = entry.get_document("info").unwrap();
    assert_eq!(info.get_bool("readOnly"), Ok(false));
    assert!(matches!(info.get("uuid"), Some(Bson::Binary(b)) if b.bytes.len() == 16));
    assert_eq!(
        entry.get_document("idIndex").unwrap().get_str("name"),
        Ok("_id_")
    );
    assert_eq!(
        listed.get_document("cursor").unwrap().get_str("ns"),
        Ok("shop.$cmd.listCollections")
    );

    let name_only = run(
        &db,
        doc! {"listCollections": 1, "nameOnly": true, "authorizedCollections": true},
    )
    .await;
    for entry in first_batch(&name_only) {
        assert_eq!(entry.keys().collect::<Vec<_>>(), vec!["name", "type"]);
    }
    server.stop().await;
}

#[tokio::test]
async fn list_databases_reports_names_and_sizes() {
    let server = TestServer::start().await;
    let client = server.client();
    for name in ["alpha", "beta"] {
        client
            .database(name)
            .collection::<Document>("c")
            .insert_one(doc! {"v": name})
            .await
            .unwrap();
    }
    let admin = client.database("admin");
    let reply = run(&admin, doc! {"listDatabases": 1}).await;
    let databases = reply.get_array("databases").unwrap();
    let names: Vec<&str> = databases
        .iter()
        .map(|d| d.as_document().unwrap().get_str("name").unwrap())
        .collect();
    assert!(names.contains(&"alpha") && names.contains(&"beta"));
    let alpha = databases[names.iter().position(|n| *n == "alpha").unwrap()]
        .as_document()
        .unwrap();
    assert!(alpha.get_i64("sizeOnDisk").unwrap() > 0);
    assert_eq!(alpha.get_bool("empty"), Ok(false));
    assert!(reply.get_i64("totalSize").unwrap() > 0);

    let filtered = run(
        &admin,
        doc! {"listDatabases": 1, "nameOnly": true, "filter": {"name": "beta"}},
    )
    .await;
    assert_eq!(
        filtered.get_array("databases").unwrap(),
        &vec![Bson::Document(doc! {"name": "beta"})]
    );
    assert_eq!(
        client.list_database_names().await.unwrap().len(),
        names.len()
    );
    let denied = command_error(
        client
            .database("alpha")
            .run_command(doc! {"listDatabases": 1})
            .await,
    );
    assert_eq!(denied.0, 13);
    server.stop().await;
}

#[tokio::test]
async fn drop_and_drop_database() {
    let server = TestServer::start().await;
    let client = server.client();
    let db = client.database("tmp");
    let coll = db.collection::<Document>("c");
    coll.insert_one(doc! {"a": 1}).await.unwrap();
    coll.create_index(IndexModel::builder().keys(doc! {"a": 1}).build())
        .await
        .unwrap();
    let dropped = run(&db, doc! {"drop": "c"}).await;
    assert_eq!(dropped.get_i32("nIndexesWas"), Ok(2));
    assert_eq!(dropped.get_str("ns"), Ok("tmp.c"));
    let missing = command_error(db.run_command(doc! {"drop": "c"}).await);
    assert_eq!((missing.0, missing.2.as_str()), (26, "ns not found"));
    coll.drop().await.unwrap();

    coll.insert_one(doc! {"a": 1}).await.unwrap();
    let reply = run(&db, doc! {"dropDatabase": 1}).await;
    assert_eq!(reply.get_str("dropped"), Ok("tmp"));
    assert!(!client
        .list_database_names()
        .await
        .unwrap()
        .contains(&"tmp".to_string()));
    server.stop().await;
}

#[tokio::test]
async fn rename_collection_within_and_across_databases() {
    let server = TestServer::start().await;
    let client = server.client();
    let admin = client.database("admin");
    let a = client.database("a");
    a.collection::<Document>("src")
        .insert_one(doc! {"_id": 1})
        .await
        .unwrap();
    a.collection::<Document>("src")
        .create_index(IndexModel::builder().keys(doc! {"k": 1}).build())
        .await
        .unwrap();
    a.collection::<Document>("taken")
        .insert_one(doc! {"_id": 2})
        .await
        .unwrap();
    run(&admin, doc! {"renameCollection": "a.src", "to": "a.dst"}).await;
    let exists = command_error(
        admin
            .run_command(doc! {"renameCollection": "a.dst", "to": "a.taken"})
            .await,
    );
    assert_eq!(exists.0, 48);
    run(
        &admin,
        doc! {"renameCollection": "a.dst", "to": "a.taken", "dropTarget": true},
    )
    .await;
    let moved = a
        .collection::<Document>("taken")
        .find_one(doc! {})
        .await
        .unwrap()
        .unwrap();
    assert_eq!(moved.get_i32("_id"), Ok(1));
    run(
        &admin,
        doc! {"renameCollection": "a.taken", "to": "b.moved"},
    )
    .await;
    let b = client.database("b");
    assert_eq!(
        b.collection::<Document>("moved")
            .estimated_document_count()
            .await
            .unwrap(),
        1
    );
    let indexes = b
        .collection::<Document>("moved")
        .list_index_names()
        .await
        .unwrap();
    assert_eq!(indexes, vec!["_id_", "k_1"]);
    let missing = command_error(
        admin
            .run_command(doc! {"renameCollection": "a.nope", "to": "a.x"})
            .await,
    );
    assert_eq!(missing.0, 26);
    let not_admin = command_error(
        a.run_command(doc! {"renameCollection": "a.x", "to": "a.y"})
            .await,
    );
    assert_eq!(not_admin.0, 13);
    server.stop().await;
}

#[tokio::test]
async fn db_stats_and_coll_stats() {
    let server = TestServer::start().await;
    let db = server.client().database("stats");
    let docs: Vec<Document> = (0..100)
        .map(|i| doc! {"_id": i, "pad": "x".repeat(100)})
        .collect();
    run(&db, doc! {"insert": "c", "documents": docs}).await;
    let stats = run(&db, doc! {"dbStats": 1}).await;
    assert_eq!(stats.get_str("db"), Ok("stats"));
    assert_eq!(stats.get_i64("collections"), Ok(1));
    assert_eq!(stats.get_i64("objects"), Ok(100));
    assert!(stats.get_f64("dataSize").unwrap() > 10_000.0);
    assert_eq!(stats.get_i64("indexes"), Ok(1));
    let coll = run(&db, doc! {"collStats": "c"}).await;
    assert_eq!(coll.get_i64("count"), Ok(100));
    assert!(coll.get_i64("size").unwrap() > 10_000);
    assert!(coll.get_i64("avgObjSize").unwrap() > 100);
    assert_eq!(coll.get_i32("nindexes"), Ok(1));
    assert!(coll
        .get_document("indexSizes")
        .unwrap()
        .contains_key("_id_"));
    let scaled = run(&db, doc! {"collStats": "c", "scale": 1024}).await;
    assert_eq!(
        scaled.get_i64("size").unwrap(),
        coll.get_i64("size").unwrap() / 1024
    );
    let missing = command_error(db.run_command(doc! {"collStats": "nope"}).await);
    assert_eq!(missing.0, 26);
    server.stop().await;
}

#[tokio::test]
async fn namespaces_are_validated() {
    let server = TestServer::start().await;
    let client = server.client();
    let db = client.database("ok");
    for bad in ["a$b", ""] {
        let error = command_error(
            db.run_command(doc! {"insert": bad, "documents": [{}]})
                .await,
        );
        assert_eq!(error.0, 73, "{bad:?}");
    }
    let error = command_error(
        db.run_command(doc! {"insert": "system.views", "documents": [{}]})
            .await,
    );
    assert_eq!(error.0, 73);
    let error = command_error(
        client
            .database("bad.db")
            .run_command(doc! {"insert": "c", "documents": [{}]})
            .await,
    );
    assert_eq!(error.0, 73);
    let error = command_error(db.run_command(doc! {"find": 5}).await);
    assert_eq!(error.0, 73);
    server.stop().await;
}

#[tokio::test]
async fn unique_indexes_reject_duplicates() {
    let server = TestServer::start().await;
    let db = server.client().database("idx");
    let coll = db.collection::<Document>("users");
    coll.insert_many(vec![doc! {"email": "a@x"}, doc! {"email": "b@x"}])
        .await
        .unwrap();
    let model = IndexModel::builder()
        .keys(doc! {"email": 1})
        .options(IndexOptions::builder().unique(true).build())
        .build();
    assert_eq!(
        coll.create_index(model).await.unwrap().index_name,
        "email_1"
    );
    let reply = run(
        &db,
        doc! {"insert": "users", "documents": [{"email": "a@x"}]},
    )
    .await;
    let error = reply.get_array("writeErrors").unwrap()[0]
        .as_document()
        .unwrap()
        .clone();
    assert_eq!(error.get_i32("code"), Ok(11000));
    assert_eq!(
        error.get_document("keyPattern").unwrap(),
        &doc! {"email": 1}
    );
    assert_eq!(
        error.get_document("keyValue").unwrap(),
        &doc! {"email": "a@x"}
    );
    // Building a unique index over existing duplicates fails and creates nothing.
    // (A second document without `email` would itself collide on null in `email_1`, as in mongod.)
    coll.insert_one(doc! {"team": 1, "email": "c@x"})
        .await
        .unwrap();
    coll.insert_one(doc! {"team": 1, "email": "d@x"})
        .await
        .unwrap();
    let failed = command_error(
        db.run_command(doc! {"createIndexes": "users", "indexes": [{"key": {"team": 1}, "name": "team_1", "unique": true}]})
            .await,
    );
    assert_eq!(failed.0, 11000);
    assert_eq!(
        coll.list_index_names().await.unwrap(),
        vec!["_id_", "email_1"]
    );
    // Queries through the index see the right documents.
    let found = coll.find_one(doc! {"email": "b@x"}).await.unwrap().unwrap();
    assert_eq!(found.get_str("email"), Ok("b@x"));
    server.stop().await;
}

#[tokio::test]
async fn create_indexes_reply_shapes_and_conflicts() {
    let server = TestServer::start().await;
    let db = server.client().database("idx");
    let create = |spec: Document| doc! {"createIndexes": "c", "indexes": [spec]};
    let first = run(&db, create(doc! {"key": {"a": 1}, "name": "a_1"})).await;
    assert_eq!(first.get_i32("numIndexesBefore"), Ok(1));
    assert_eq!(first.get_i32("numIndexesAfter"), Ok(2));
    assert_eq!(first.get_bool("createdCollectionAutomatically"), Ok(true));
    let again = run(&db, create(doc! {"key": {"a": 1}, "name": "a_1"})).await;
    assert_eq!(again.get_str("note"), Ok("all indexes already exist"));
    let cases = [
        (doc! {"key": {"b": 1}, "name": "a_1"}, 86),
        (doc! {"key": {"a": 1}, "name": "a_1", "unique": true}, 85),
        (doc! {"key": {"a": 1}, "name": "other"}, 85),
        (doc! {"key": {"a": 1}, "name": "a_1", "bogus": 1}, 197),
        (doc! {"key": {"a": 0}, "name": "zero"}, 67),
        (doc! {"key": {"a": 1}, "name": "*"}, 2),
        (
            doc! {"key": {"_id": 1}, "name": "_id_", "unique": true},
            197,
        ),
        (doc! {"key": {"t": "2dsphere"}, "name": "t_2dsphere"}, 238),
    ];
    for (spec, code) in cases {
        let error = command_error(db.run_command(create(spec.clone())).await);
        assert_eq!(error.0, code, "{spec}");
    }
    let empty = command_error(
        db.run_command(doc! {"createIndexes": "c", "indexes": []})
            .await,
    );
    assert_eq!(empty.0, 2);

    let listed = run(&db, doc! {"listIndexes": "c"}).await;
    let specs = first_batch(&listed);
    assert_eq!(specs[0], doc! {"v": 2, "key": {"_id": 1}, "name": "_id_"});
    assert_eq!(specs[1], doc! {"v": 2, "key": {"a": 1}, "name": "a_1"});
    assert_eq!(
        listed.get_document("cursor").unwrap().get_str("ns"),
        Ok("idx.$cmd.listIndexes.c")
    );
    let missing = command_error(db.run_command(doc! {"listIndexes": "nope"}).await);
    assert_eq!(missing.0, 26);
    server.stop().await;
}

#[tokio::test]
async fn drop_indexes_by_name_key_list_and_star() {
    let server = TestServer::start().await;
    let db = server.client().database("idx");
    let specs: Vec<Document> = ["a", "b", "c", "d"]
        .iter()
        .map(|f| doc! {"key": {*f: 1}, "name": format!("{f}_1")})
        .collect();
    run(&db, doc! {"createIndexes": "c", "indexes": specs}).await;
    let by_name = run(&db, doc! {"dropIndexes": "c", "index": "a_1"}).await;
    assert_eq!(by_name.get_i32("nIndexesWas"), Ok(5));
    run(&db, doc! {"dropIndexes": "c", "index": {"b": 1}}).await;
    run(&db, doc! {"dropIndexes": "c", "index": ["c_1"]}).await;
    let id = command_error(
        db.run_command(doc! {"dropIndexes": "c", "index": "_id_"})
            .await,
    );
    assert_eq!((id.0, id.2.as_str()), (72, "cannot drop _id index"));
    let unknown = command_error(
        db.run_command(doc! {"dropIndexes": "c", "index": "zzz"})
            .await,
    );
    assert_eq!(
        (unknown.0, unknown.2.as_str()),
        (27, "index not found with name [zzz]")
    );
    let star = run(&db, doc! {"dropIndexes": "c", "index": "*"}).await;
    assert_eq!(star.get_i32("nIndexesWas"), Ok(2));
    assert_eq!(
        star.get_str("msg"),
        Ok("non-_id indexes dropped for collection")
    );
    let names = db
        .collection::<Document>("c")
        .list_index_names()
        .await
        .unwrap();
    assert_eq!(names, vec!["_id_"]);
    server.stop().await;
}

#[tokio::test]
async fn index_scans_find_the_same_documents_as_collection_scans() {
    let server = TestServer::start().await;
    let db = server.client().database("idx");
    let coll = db.collection::<Document>("c");
    let docs: Vec<Document> = (0..300)
        .map(|i| match i % 5 {
            0 => doc! {"_id": i, "v": i},
            1 => doc! {"_id": i, "v": [i, i + 1000]},
            2 => doc! {"_id": i, "v": format!("s{i}")},
            3 => doc! {"_id": i},
            _ => doc! {"_id": i, "v": i as f64 + 0.5},
        })
        .collect();
    coll.insert_many(docs).await.unwrap();
    let filters = vec![
        doc! {"v": {"$gte": 100, "$lt": 200}},
        doc! {"v": {"$in": [5, 6, 1006, "s7", null]}},
        doc! {"v": {"$gt": 1100}},
        doc! {"v": null},
        doc! {"v": {"$lte": "s5"}},
    ];
    let ids = |docs: Vec<Document>| {
        let mut ids: Vec<i32> = docs.iter().map(|d| d.get_i32("_id").unwrap()).collect();
        ids.sort();
        ids
    };
    use futures::TryStreamExt;
    let mut before = Vec::new();
    for filter in &filters {
        before.push(ids(coll
            .find(filter.clone())
            .await
            .unwrap()
            .try_collect()
            .await
            .unwrap()));
    }
    coll.create_index(IndexModel::builder().keys(doc! {"v": -1}).build())
        .await
        .unwrap();
    for (filter, expected) in filters.iter().zip(before) {
        let after = ids(coll
            .find(filter.clone())
            .batch_size(7)
            .await
            .unwrap()
            .try_collect()
            .await
            .unwrap());
        assert_eq!(after, expected, "{filter}");
    }
    server.stop().await;
}
