//! Validation leftovers, collection defaults and TTL options on special index kinds, through the
//! driver. Expected values come from mongod's source and jstests:
//! `ExpressionFunction::parse` (4660800) and `DatabaseImpl::userCreateNS` / `Collection::
//! parseValidator` for validators; jstests/core/doc_validation/bypass_doc_validation.js for
//! mapReduce output; `validateStorageOptions` (storage_engine_init.cpp), collection_options.idl
//! and change_stream_pre_and_post_images.idl for collection defaults; `validateIndexSpecTTL`,
//! `IndexCatalogImpl::_isSpecOk`, coll_mod.cpp and ttl.cpp (`special index can't be used as a
//! TTL index, skipping TTL job`) for TTL options on hashed, text and wildcard indexes.

mod common;

use bson::{doc, Bson, Document};
use common::TestServer;
use mongodb::Database;

const T0: i64 = 1_700_000_000_000;

async fn run(db: &Database, command: Document) -> mongodb::error::Result<Document> {
    db.run_command(command).await
}

async fn options_of(db: &Database, name: &str) -> Document {
    let reply = run(db, doc! {"listCollections": 1, "filter": {"name": name}})
        .await
        .unwrap();
    let entries = common::first_batch(&reply);
    assert_eq!(entries.len(), 1, "{reply}");
    entries[0].get_document("options").unwrap().clone()
}

async fn index_named(db: &Database, coll: &str, name: &str) -> Document {
    let reply = run(db, doc! {"listIndexes": coll}).await.unwrap();
    common::first_batch(&reply)
        .into_iter()
        .find(|index| index.get_str("name") == Ok(name))
        .unwrap_or_else(|| panic!("no index {name} in {reply}"))
}

fn function_expr() -> Document {
    doc! {"$function": {"body": "function() { return true; }", "args": [], "lang": "js"}}
}

#[tokio::test]
async fn function_in_a_validator_is_refused_with_4660800() {
    let server = TestServer::start().await;
    let db = server.client().database("valdef");
    for validator in [
        doc! {"$expr": function_expr()},
        doc! {"$and": [{"a": 1}, {"$expr": {"$eq": [function_expr(), true]}}]},
    ] {
        let (code, code_name, message) =
            common::command_error(run(&db, doc! {"create": "v", "validator": validator}).await);
        assert_eq!(
            (code, code_name.as_str(), message.as_str()),
            (
                4_660_800,
                "Location4660800",
                "$function cannot be used inside a validator."
            )
        );
    }
    // collMod parses through Collection::parseValidator, which adds its context.
    run(&db, doc! {"create": "v"}).await.unwrap();
    let (code, _, message) = common::command_error(
        run(
            &db,
            doc! {"collMod": "v", "validator": {"$expr": function_expr()}},
        )
        .await,
    );
    assert_eq!(
        (code, message.as_str()),
        (
            4_660_800,
            "Parsing of collection validator failed :: caused by :: $function cannot be used inside a validator."
        )
    );
    // `$literal` is data, not an expression: accepted.
    run(
        &db,
        doc! {"collMod": "v", "validator": {"$expr": {"$literal": {"$function": 1}}}},
    )
    .await
    .unwrap();
    assert!(!options_of(&db, "v").await.is_empty());
    server.stop().await;
}

#[tokio::test]
async fn map_reduce_output_is_validated_unless_bypassed() {
    let server = TestServer::start().await;
    let db = server.client().database("valdef");
    let coll = db.collection::<Document>("input");
    coll.insert_many([doc! {"_id": 1}, doc! {"_id": 2}])
        .await
        .unwrap();
    let map = "function() { emit(1, 1); }";
    let reduce = "function() { return 'mapReduce'; }";
    for out in [doc! {"replace": "out"}, doc! {"merge": "out"}] {
        let _ = run(&db, doc! {"drop": "out"}).await;
        run(
            &db,
            doc! {"create": "out", "validator": {"a": {"$exists": true}}},
        )
        .await
        .unwrap();
        let command = |bypass: bool| {
            doc! {"mapReduce": "input", "map": map, "reduce": reduce, "out": out.clone(),
            "bypassDocumentValidation": bypass}
        };
        let (code, _, _) = common::command_error(run(&db, command(false)).await);
        assert_eq!(code, 121, "{out}");
        let output = db.collection::<Document>("out");
        assert_eq!(
            output
                .count_documents(doc! {"value": "mapReduce"})
                .await
                .unwrap(),
            0
        );
        run(&db, command(true)).await.unwrap();
        assert_eq!(
            output
                .count_documents(doc! {"value": "mapReduce"})
                .await
                .unwrap(),
            1,
            "{out}"
        );
        // The target keeps its validator.
        assert!(options_of(&db, "out").await.contains_key("validator"));
    }
    server.stop().await;
}

#[tokio::test]
async fn index_option_defaults_are_checked_stored_and_listed() {
    let server = TestServer::start().await;
    let db = server.client().database("valdef");
    run(
        &db,
        doc! {"create": "d", "indexOptionDefaults": {"storageEngine": {"redb": {}}}},
    )
    .await
    .unwrap();
    assert_eq!(
        options_of(&db, "d").await,
        doc! {"indexOptionDefaults": {"storageEngine": {"redb": {}}}}
    );
    // An empty default is not listed (CollectionOptions::toBSON).
    run(&db, doc! {"create": "e", "indexOptionDefaults": {}})
        .await
        .unwrap();
    assert_eq!(options_of(&db, "e").await, doc! {});
    // Indexes created later are listed as mongod lists them (the defaults go to the engine).
    db.collection::<Document>("d")
        .create_index(mongodb::IndexModel::builder().keys(doc! {"a": 1}).build())
        .await
        .unwrap();
    assert_eq!(
        index_named(&db, "d", "a_1").await,
        doc! {"v": 2, "key": {"a": 1}, "name": "a_1"}
    );
    let cases: [(Document, i32, &str); 5] = [
        (
            doc! {"bogus": 1},
            40415,
            "BSON field 'create.indexOptionDefaults.bogus' is an unknown field.",
        ),
        (
            doc! {"storageEngine": 1},
            14,
            "BSON field 'create.indexOptionDefaults.storageEngine' is the wrong type 'int', expected type 'object'",
        ),
        (
            doc! {"storageEngine": {"redb": 1}},
            2,
            "'storageEngine.redb' has to be an embedded document.",
        ),
        (
            doc! {"storageEngine": {"wiredTiger": {}}},
            72,
            "wiredTiger is not a registered storage engine for this server",
        ),
        (
            doc! {"storageEngine": {"redb": {"configString": "x"}}},
            72,
            "'configString' is not a supported option.",
        ),
    ];
    for (defaults, code, message) in cases {
        let (actual_code, _, actual_message) = common::command_error(
            run(
                &db,
                doc! {"create": "bad", "indexOptionDefaults": defaults.clone()},
            )
            .await,
        );
        assert_eq!(
            (actual_code, actual_message.as_str()),
            (code, message),
            "{defaults}"
        );
    }
    // The collection's own `storageEngine` follows the same rule.
    let (code, _, _) = common::command_error(
        run(
            &db,
            doc! {"create": "bad", "storageEngine": {"wiredTiger": {}}},
        )
        .await,
    );
    assert_eq!(code, 72);
    server.stop().await;
}

#[tokio::test]
async fn change_stream_pre_and_post_images_is_stored_on_create_and_coll_mod() {
    let server = TestServer::start().await;
    let db = server.client().database("valdef");
    run(
        &db,
        doc! {"create": "p", "changeStreamPreAndPostImages": {"enabled": true}},
    )
    .await
    .unwrap();
    assert_eq!(
        options_of(&db, "p").await,
        doc! {"changeStreamPreAndPostImages": {"enabled": true}}
    );
    run(
        &db,
        doc! {"collMod": "p", "changeStreamPreAndPostImages": {"enabled": false}},
    )
    .await
    .unwrap();
    assert_eq!(options_of(&db, "p").await, doc! {});
    run(
        &db,
        doc! {"collMod": "p", "changeStreamPreAndPostImages": {"enabled": true}},
    )
    .await
    .unwrap();
    assert_eq!(
        options_of(&db, "p").await,
        doc! {"changeStreamPreAndPostImages": {"enabled": true}}
    );
    let cases: [(Document, i32, &str); 3] = [
        (
            doc! {},
            40414,
            "BSON field 'create.changeStreamPreAndPostImages.enabled' is missing but a required field",
        ),
        (
            doc! {"enabled": 1},
            14,
            "BSON field 'create.changeStreamPreAndPostImages.enabled' is the wrong type 'int', expected type 'bool'",
        ),
        (
            doc! {"enabled": true, "x": 1},
            40415,
            "BSON field 'create.changeStreamPreAndPostImages.x' is an unknown field.",
        ),
    ];
    for (option, code, message) in cases {
        let (actual_code, _, actual_message) = common::command_error(
            run(
                &db,
                doc! {"create": "q", "changeStreamPreAndPostImages": option.clone()},
            )
            .await,
        );
        assert_eq!(
            (actual_code, actual_message.as_str()),
            (code, message),
            "{option}"
        );
    }
    let admin = server.client().database("admin");
    let (code, _, message) = common::command_error(
        run(
            &admin,
            doc! {"create": "q", "changeStreamPreAndPostImages": {"enabled": true}},
        )
        .await,
    );
    assert_eq!(
        (code, message.as_str()),
        (
            72,
            "changeStreamPreAndPostImages collection option is not supported on the admin database"
        )
    );
    server.stop().await;
}

#[tokio::test]
async fn ttl_options_on_special_indexes_answer_as_mongod_and_expire_nothing() {
    let (server, _clock) = TestServer::start_at(T0).await;
    let db = server.client().database("valdef");
    let coll = db.collection::<Document>("s");
    let long_ago = bson::DateTime::from_millis(T0 - 86_400_000);
    coll.insert_one(doc! {"_id": 1, "h": long_ago, "t": "words", "w": long_ago})
        .await
        .unwrap();
    let create = |spec: Document| run(&db, doc! {"createIndexes": "s", "indexes": [spec]});
    // Single-field hashed and text indexes take the option (validateIndexSpecTTL counts the key
    // pattern as written) and list it.
    create(doc! {"key": {"h": "hashed"}, "name": "h_hashed", "expireAfterSeconds": 0})
        .await
        .unwrap();
    assert_eq!(
        index_named(&db, "s", "h_hashed")
            .await
            .get("expireAfterSeconds"),
        Some(&Bson::Int32(0))
    );
    create(doc! {"key": {"t": "text"}, "name": "t_text", "expireAfterSeconds": 10})
        .await
        .unwrap();
    assert_eq!(
        index_named(&db, "s", "t_text")
            .await
            .get("expireAfterSeconds"),
        Some(&Bson::Int32(10))
    );
    // Compound keys, and wildcard indexes (_isSpecOk), are refused with 67.
    for (spec, message) in [
        (
            doc! {"key": {"a": 1, "b": "hashed"}, "name": "ab", "expireAfterSeconds": 1},
            "TTL indexes are single-field indexes, compound indexes do not support TTL.",
        ),
        (
            doc! {"key": {"x": "text", "y": "text"}, "name": "xy", "expireAfterSeconds": 1},
            "TTL indexes are single-field indexes, compound indexes do not support TTL.",
        ),
        (
            doc! {"key": {"$**": 1}, "name": "all", "expireAfterSeconds": 1},
            "Index type 'wildcard' cannot be a TTL index",
        ),
    ] {
        let (code, _, actual) = common::command_error(create(spec.clone()).await);
        assert_eq!(code, 67, "{spec}");
        assert!(actual.contains(message), "{spec}: {actual}");
    }
    // collMod counts the stored key pattern: a hashed or wildcard index becomes TTL, a text
    // index (stored as {_fts, _ftsx}) does not.
    create(doc! {"key": {"w": "hashed"}, "name": "w_hashed"})
        .await
        .unwrap();
    let reply = run(
        &db,
        doc! {"collMod": "s", "index": {"name": "w_hashed", "expireAfterSeconds": 5}},
    )
    .await
    .unwrap();
    assert_eq!(reply.get_i64("expireAfterSeconds_new"), Ok(5));
    create(doc! {"key": {"$**": 1}, "name": "all"})
        .await
        .unwrap();
    run(
        &db,
        doc! {"collMod": "s", "index": {"name": "all", "expireAfterSeconds": 5}},
    )
    .await
    .unwrap();
    let (code, _, message) = common::command_error(
        run(
            &db,
            doc! {"collMod": "s", "index": {"name": "t_text", "expireAfterSeconds": 5}},
        )
        .await,
    );
    assert_eq!(
        (code, message.as_str()),
        (
            72,
            "TTL indexes are single-field indexes, compound indexes do not support TTL"
        )
    );
    // mongod's TTL monitor skips special indexes: the day-old document stays, visible and stored.
    let admin = server.client().database("admin");
    let pass = run(&admin, doc! {"runTtlPass": 1}).await.unwrap();
    assert_eq!(pass.get_i64("deleted"), Ok(0));
    assert_eq!(coll.count_documents(doc! {}).await.unwrap(), 1);
    server.stop().await;
}
