//! Nesting and path-length limits: every recursive walk over client data gets its deepest legal
//! input and an illegal one, and the server answers both and keeps serving. Expected codes and
//! messages are mongod's (`bson_validate.cpp`, `ops/insert.cpp`, `update/storage_validation.cpp`,
//! `field_path.cpp`, `document.cpp`).
//!
//! The server runs on a runtime with the stack size production threads get
//! (`limits::THREAD_STACK_BYTES`), in a debug build, where frames are largest.

mod common;

use std::future::Future;

use bson::{doc, Bson, Document};
use common::raw::{connect, kind0, kind1, op_msg, op_query, roundtrip, OP_MSG};
use common::TestServer;
use mongodb::Database;

/// Runs a test on a runtime whose worker threads have production's stack size.
fn on_server_runtime(test: impl Future<Output = ()> + Send + 'static) {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_stack_size(tideway_base::limits::THREAD_STACK_BYTES)
        .enable_all()
        .build()
        .unwrap()
        .block_on(async move { tokio::spawn(test).await.unwrap() });
}

/// `leaf` wrapped in `levels` documents `{a: …}`.
fn nested(levels: usize, leaf: Bson) -> Bson {
    (0..levels).fold(leaf, |inner, _| Bson::Document(doc! {"a": inner}))
}

/// `leaf` wrapped in `levels` arrays.
fn nested_arrays(levels: usize, leaf: Bson) -> Bson {
    (0..levels).fold(leaf, |inner, _| Bson::Array(vec![inner]))
}

/// A filter `{$and: [{$and: [… {a: 1} …]}]}` with `levels` `$and`s.
fn nested_and(levels: usize) -> Document {
    (0..levels).fold(doc! {"a": 1}, |inner, _| doc! {"$and": [inner]})
}

const DOCUMENT: u8 = 0x03;
const ARRAY: u8 = 0x04;

/// The bytes of a command document: the fields of `prefix`, then a field opening the chain of
/// containers `chain` (outermost first: the BSON type of each container and the name of the
/// element holding it), whose innermost container holds `{x: 1}`, then `$db`. Written in one pass
/// without recursion, so chains of any length cost only their bytes.
fn deep_command(prefix: &Document, chain: &[(u8, String)], db: &str) -> Vec<u8> {
    // sizes[j]: the encoded size of the container chain[j] opens.
    let leaf_container = 4 + (1 + 2 + 4) + 1;
    let mut sizes = vec![leaf_container; chain.len()];
    for j in (0..chain.len().saturating_sub(1)).rev() {
        let (_, child_name) = &chain[j + 1];
        sizes[j] = 4 + 1 + child_name.len() + 1 + sizes[j + 1] + 1;
    }
    let prefix_bytes = bson::to_vec(prefix).unwrap();
    let prefix_elements = &prefix_bytes[4..prefix_bytes.len() - 1];
    let suffix_bytes = bson::to_vec(&doc! {"$db": db}).unwrap();
    let suffix_elements = &suffix_bytes[4..suffix_bytes.len() - 1];
    let chain_element = 1 + chain[0].1.len() + 1 + sizes[0];
    let total = 4 + prefix_elements.len() + chain_element + suffix_elements.len() + 1;
    let mut out = Vec::with_capacity(total);
    out.extend((total as i32).to_le_bytes());
    out.extend(prefix_elements);
    for ((kind, name), size) in chain.iter().zip(&sizes) {
        out.push(*kind);
        out.extend(name.as_bytes());
        out.push(0);
        out.extend((*size as i32).to_le_bytes());
    }
    out.extend([0x10, b'x', 0]);
    out.extend(1i32.to_le_bytes());
    out.extend(std::iter::repeat_n(0u8, chain.len()));
    out.extend(suffix_elements);
    out.push(0);
    assert_eq!(out.len(), total);
    out
}

/// `levels` copies of `pattern`, flattened.
fn repeat(pattern: &[(u8, &str)], levels: usize) -> Vec<(u8, String)> {
    pattern
        .iter()
        .map(|(kind, name)| (*kind, name.to_string()))
        .cycle()
        .take(levels)
        .collect()
}

/// Sends a raw OP_MSG body and returns the reply document.
async fn raw_command(server: &TestServer, body: Vec<u8>) -> Document {
    let mut stream = connect(server).await;
    let mut section = vec![0u8];
    section.extend(body);
    let reply = roundtrip(&mut stream, &op_msg(7, 0, &[section])).await;
    assert_eq!(reply.op_code, OP_MSG);
    // The same connection still serves.
    let ping = roundtrip(
        &mut stream,
        &op_msg(8, 0, &[kind0(&doc! {"ping": 1, "$db": "admin"})]),
    )
    .await;
    assert_eq!(ping.document.get_f64("ok"), Ok(1.0));
    reply.document
}

fn assert_code(reply: &Document, code: i32, message_start: &str) {
    assert_eq!(reply.get_f64("ok"), Ok(0.0), "{reply}");
    assert_eq!(reply.get_i32("code"), Ok(code), "{reply}");
    let errmsg = reply.get_str("errmsg").unwrap();
    assert!(errmsg.starts_with(message_start), "{errmsg}");
}

/// The reply of a command that must succeed.
async fn ok(db: &Database, command: Document) -> Document {
    let name = command.keys().next().cloned().unwrap_or_default();
    db.run_command(command)
        .await
        .unwrap_or_else(|error| panic!("{name} failed: {}", error.kind))
}

/// The (code, errmsg) of a command that must fail.
async fn fails(db: &Database, command: Document) -> (i32, String) {
    let (code, _, errmsg) = common::command_error(db.run_command(command).await);
    (code, errmsg)
}

/// The first write error of a write command's reply.
async fn write_error(db: &Database, command: Document) -> (i32, String) {
    let reply = ok(db, command).await;
    let errors = reply.get_array("writeErrors").expect("a write error");
    let error = errors[0].as_document().unwrap();
    (
        error.get_i32("code").unwrap(),
        error.get_str("errmsg").unwrap().to_string(),
    )
}

const STORAGE_INSERT: &str = "cannot insert document because it exceeds 180 levels of nesting";
const STORAGE_UPDATE: &str = "Document exceeds maximum nesting depth of 180";
const WIRE_DEPTH: &str = "BSONObj exceeds maximum nested object depth";
const TO_BSON: &str =
    "cannot convert document to BSON because it exceeds the limit of 200 levels of nesting";

#[test]
fn crafted_deep_requests_get_error_replies_and_the_server_lives() {
    on_server_runtime(async {
        let server = TestServer::start().await;
        let find = doc! {"find": "c"};
        let insert = doc! {"insert": "c"};
        let cases: Vec<(&str, Vec<u8>)> = vec![
            (
                "find with $and nested 1,000 deep",
                deep_command(
                    &find,
                    &[
                        vec![(DOCUMENT, "filter".to_string())],
                        repeat(&[(ARRAY, "$and"), (DOCUMENT, "0")], 2000),
                    ]
                    .concat(),
                    "test",
                ),
            ),
            (
                "insert of a document nested 100,000 deep",
                deep_command(
                    &insert,
                    &[
                        repeat(&[(ARRAY, "documents"), (DOCUMENT, "0")], 2),
                        repeat(&[(DOCUMENT, "a")], 100_000),
                    ]
                    .concat(),
                    "test",
                ),
            ),
            (
                "insert of an array nested 100,000 deep",
                deep_command(
                    &insert,
                    &[
                        repeat(&[(ARRAY, "documents"), (DOCUMENT, "0"), (ARRAY, "a")], 3),
                        repeat(&[(ARRAY, "0")], 100_000),
                    ]
                    .concat(),
                    "test",
                ),
            ),
            (
                "insert of a document nested 1,000 deep",
                deep_command(
                    &insert,
                    &[
                        repeat(&[(ARRAY, "documents"), (DOCUMENT, "0")], 2),
                        repeat(&[(DOCUMENT, "a")], 1000),
                    ]
                    .concat(),
                    "test",
                ),
            ),
        ];
        for (what, body) in cases {
            let reply = raw_command(&server, body).await;
            assert_code(&reply, 15, WIRE_DEPTH);
            assert_eq!(reply.get_str("codeName"), Ok("Overflow"), "{what}");
        }
        // Other clients were served throughout.
        let db = server.client().database("test");
        ok(&db, doc! {"ping": 1}).await;
        server.stop().await;
    });
}

#[test]
fn every_wire_entry_checks_depth() {
    on_server_runtime(async {
        let server = TestServer::start().await;
        let mut stream = connect(&server).await;
        // A document sequence (kind 1): each document is checked from its own root.
        let legal = doc! {"_id": 1, "v": nested(199, Bson::Int32(1))};
        let deep = doc! {"_id": 2, "v": nested(201, Bson::Int32(1))};
        let reply = roundtrip(
            &mut stream,
            &op_msg(
                1,
                0,
                &[
                    kind0(&doc! {"insert": "seq", "$db": "test"}),
                    kind1("documents", &[deep]),
                ],
            ),
        )
        .await;
        assert_code(&reply.document, 15, WIRE_DEPTH);
        assert!(reply
            .document
            .get_str("errmsg")
            .unwrap()
            .ends_with("in object with _id: 2"));
        // The deepest legal sequence document passes the wire and meets the storage limit.
        let reply = roundtrip(
            &mut stream,
            &op_msg(
                2,
                0,
                &[
                    kind0(&doc! {"insert": "seq", "$db": "test"}),
                    kind1("documents", &[legal]),
                ],
            ),
        )
        .await;
        let errors = reply.document.get_array("writeErrors").unwrap();
        assert_eq!(
            errors[0].as_document().unwrap().get_str("errmsg"),
            Ok(STORAGE_INSERT)
        );
        // The legacy OP_QUERY handshake.
        let query = doc! {"isMaster": 1, "client": nested(201, Bson::Int32(1))};
        let reply = roundtrip(&mut stream, &op_query(3, "admin.$cmd", &query)).await;
        assert_code(&reply.document, 15, WIRE_DEPTH);
        server.stop().await;
    });
}

#[test]
fn the_deepest_legal_command_document_is_served() {
    on_server_runtime(async {
        let server = TestServer::start().await;
        let db = server.client().database("test");
        // 200 containers below the command's root: the filter itself and 199 inside it.
        let deepest = nested(199, Bson::Int32(1));
        let reply = ok(&db, doc! {"find": "c", "filter": {"a": deepest.clone()}}).await;
        assert!(reply.get_document("cursor").is_ok());
        let (code, errmsg) = fails(
            &db,
            doc! {"find": "c", "filter": {"a": nested(200, Bson::Int32(1))}},
        )
        .await;
        assert_eq!(code, 15);
        assert!(errmsg.starts_with(WIRE_DEPTH), "{errmsg}");
        // 99 `$and`s: each costs an array and a document (199 containers with the filter);
        // a 100th crosses the limit, which is how mongod bounds query trees.
        ok(&db, doc! {"find": "c", "filter": nested_and(99)}).await;
        let (code, _) = fails(&db, doc! {"find": "c", "filter": nested_and(100)}).await;
        assert_eq!(code, 15);
        server.stop().await;
    });
}

#[test]
fn stored_documents_are_bounded_at_180_levels_on_every_write_path() {
    on_server_runtime(async {
        let server = TestServer::start().await;
        let db = server.client().database("test");
        ok(
            &db,
            doc! {"createIndexes": "c", "indexes": [{"key": {"v": 1}, "name": "v_1"}]},
        )
        .await;
        // `v` is level 1: 179 documents below it put the scalar at level 180.
        let deepest = nested(179, Bson::Int32(1));
        let too_deep = nested(180, Bson::Int32(1));
        ok(
            &db,
            doc! {"insert": "c", "documents": [{"_id": 1, "v": deepest.clone()}]},
        )
        .await;
        ok(&db, doc! {"insert": "c", "documents": [{"_id": 2, "v": nested_arrays(179, Bson::Int32(2))}]}).await;
        // An empty object may sit at the last level.
        ok(&db, doc! {"insert": "c", "documents": [{"_id": 3, "v": nested(179, Bson::Document(doc! {}))}]}).await;

        let (code, errmsg) = write_error(
            &db,
            doc! {"insert": "c", "documents": [{"_id": 9, "v": too_deep.clone()}]},
        )
        .await;
        assert_eq!((code, errmsg.as_str()), (15, STORAGE_INSERT));
        let (code, errmsg) = write_error(
            &db,
            doc! {"insert": "c", "documents": [{"_id": 9, "v": nested_arrays(180, Bson::Int32(1))}]},
        )
        .await;
        assert_eq!((code, errmsg.as_str()), (15, STORAGE_INSERT));

        // Updates: a deep value, a long path, a replacement, an upsert, findAndModify.
        let update_error = |update: Document| {
            doc! {"update": "c", "updates": [update]}
        };
        let (code, errmsg) = write_error(
            &db,
            update_error(doc! {"q": {"_id": 1}, "u": {"$set": {"w": too_deep.clone()}}}),
        )
        .await;
        assert_eq!((code, errmsg.as_str()), (15, STORAGE_UPDATE));
        let long_path = vec!["p"; 181].join(".");
        let (code, errmsg) = write_error(
            &db,
            update_error(doc! {"q": {"_id": 1}, "u": {"$set": {long_path: 1}}}),
        )
        .await;
        assert_eq!((code, errmsg.as_str()), (15, STORAGE_UPDATE));
        let legal_path = vec!["p"; 180].join(".");
        ok(
            &db,
            update_error(doc! {"q": {"_id": 1}, "u": {"$set": {legal_path: 1}}}),
        )
        .await;
        let (code, errmsg) = write_error(
            &db,
            update_error(doc! {"q": {"_id": 2}, "u": {"_id": 2, "v": too_deep.clone()}}),
        )
        .await;
        assert_eq!((code, errmsg.as_str()), (15, STORAGE_UPDATE));
        let (code, _) = write_error(
            &db,
            update_error(
                doc! {"q": {"_id": 50}, "u": {"$set": {"v": too_deep.clone()}}, "upsert": true},
            ),
        )
        .await;
        assert_eq!(code, 15);
        let (code, errmsg) = fails(
            &db,
            doc! {"findAndModify": "c", "query": {"_id": 3}, "update": {"$set": {"v": too_deep.clone()}}},
        )
        .await;
        assert_eq!((code, errmsg.as_str()), (15, STORAGE_UPDATE));
        // `$push` nests an array level below the path.
        let (code, _) = write_error(
            &db,
            update_error(
                doc! {"q": {"_id": 3}, "u": {"$push": {"list": nested(179, Bson::Int32(1))}}},
            ),
        )
        .await;
        assert_eq!(code, 15);

        // Nothing too deep was stored; what was stored is read, compared, sorted, grouped,
        // indexed and printed at full depth.
        let count = ok(&db, doc! {"count": "c"}).await;
        assert_eq!(count.get_i32("n"), Ok(3));
        let found = ok(&db, doc! {"find": "c", "filter": {"v": deepest.clone()}}).await;
        let batch = found
            .get_document("cursor")
            .unwrap()
            .get_array("firstBatch")
            .unwrap();
        assert_eq!(batch.len(), 1);
        ok(&db, doc! {"find": "c", "sort": {"v": -1}}).await;
        ok(&db, doc! {"distinct": "c", "key": "v"}).await;
        ok(&db, doc! {"aggregate": "c", "pipeline": [{"$group": {"_id": "$v", "n": {"$sum": 1}}}], "cursor": {}}).await;
        let (code, errmsg) = fails(
            &db,
            doc! {"aggregate": "c", "pipeline": [{"$match": {"_id": 1}}, {"$replaceRoot": {"newRoot": "$missing"}}], "cursor": {}},
        )
        .await;
        assert_eq!(code, 40228, "{errmsg}");
        server.stop().await;
    });
}

#[test]
fn field_paths_are_bounded_before_anything_walks_them() {
    on_server_runtime(async {
        let server = TestServer::start().await;
        let db = server.client().database("test");
        ok(&db, doc! {"insert": "c", "documents": [{"_id": 1}]}).await;
        // A million components: two megabytes of path, refused without being split.
        let huge = vec!["a"; 1_000_000].join(".");
        let filter_limit = vec!["a"; 181].join(".");
        let filter_legal = vec!["a"; 180].join(".");
        let (code, errmsg) = fails(&db, doc! {"find": "c", "filter": {huge.clone(): 1}}).await;
        assert_eq!((code, errmsg.as_str()), (5729100, "FieldPath is too long"));
        let (code, _) = fails(&db, doc! {"find": "c", "filter": {filter_limit: 1}}).await;
        assert_eq!(code, 5729100);
        ok(&db, doc! {"find": "c", "filter": {filter_legal: 1}}).await;

        let field_limit = vec!["a"; 201].join(".");
        let field_legal = vec!["a"; 200].join(".");
        for (what, command) in [
            (
                "projection",
                doc! {"find": "c", "projection": {huge.clone(): 1}},
            ),
            (
                "projection",
                doc! {"find": "c", "projection": {field_limit.clone(): 1}},
            ),
            ("sort", doc! {"find": "c", "sort": {huge.clone(): 1}}),
            ("sort", doc! {"find": "c", "sort": {field_limit.clone(): 1}}),
            (
                "expression",
                doc! {"aggregate": "c", "pipeline": [{"$project": {"x": format!("${huge}")}}], "cursor": {}},
            ),
            (
                "$addFields",
                doc! {"aggregate": "c", "pipeline": [{"$addFields": {field_limit.clone(): 1}}], "cursor": {}},
            ),
        ] {
            let (code, errmsg) = fails(&db, command).await;
            assert_eq!(code, 15, "{what}");
            // Stage errors carry mongod's `Invalid $project :: caused by ::` prefix.
            assert!(
                errmsg.ends_with("FieldPath is too long"),
                "{what}: {errmsg}"
            );
        }
        ok(
            &db,
            doc! {"find": "c", "projection": {field_legal.clone(): 1}},
        )
        .await;
        ok(&db, doc! {"find": "c", "sort": {field_legal.clone(): 1}}).await;
        ok(
            &db,
            doc! {"aggregate": "c", "pipeline": [{"$project": {"x": format!("${field_legal}")}}], "cursor": {}},
        )
        .await;
        // An update path of a million components creates nothing past level 180.
        let (code, errmsg) = write_error(
            &db,
            doc! {"update": "c", "updates": [{"q": {"_id": 1}, "u": {"$set": {huge.clone(): 1}}}]},
        )
        .await;
        assert_eq!((code, errmsg.as_str()), (15, STORAGE_UPDATE));
        // …while one that names nothing changes nothing, as in mongod.
        ok(
            &db,
            doc! {"update": "c", "updates": [{"q": {"_id": 1}, "u": {"$unset": {huge.clone(): 1}}}]},
        )
        .await;
        server.stop().await;
    });
}

#[test]
fn deep_expressions_projections_and_pipelines() {
    on_server_runtime(async {
        let server = TestServer::start().await;
        let db = server.client().database("test");
        ok(&db, doc! {"insert": "c", "documents": [{"_id": 1, "n": 1, "v": nested(170, Bson::Int32(1))}]}).await;
        // An expression nearly as deep as the wire allows: below `pipeline`, the stage and
        // `$project`, 97 `$add`s (a document and an array each) reach 197 containers.
        let expression = (0..97).fold(Bson::String("$n".into()), |inner, _| {
            Bson::Document(doc! {"$add": [inner, 1]})
        });
        let reply = ok(
            &db,
            doc! {"aggregate": "c", "pipeline": [{"$project": {"x": expression.clone()}}], "cursor": {}},
        )
        .await;
        let first = reply
            .get_document("cursor")
            .unwrap()
            .get_array("firstBatch")
            .unwrap()[0]
            .as_document()
            .unwrap()
            .clone();
        assert_eq!(
            first
                .get_i32("x")
                .or_else(|_| first.get_i64("x").map(|v| v as i32)),
            Ok(98)
        );
        // A nested projection as deep as the wire allows.
        ok(&db, doc! {"find": "c", "projection": nested(199, Bson::Int32(1)).as_document().unwrap().clone()}).await;
        // `$elemMatch` and `$not` nest filters too.
        let elem_match = (0..98).fold(doc! {"a": 1}, |inner, _| doc! {"a": {"$elemMatch": inner}});
        ok(&db, doc! {"find": "c", "filter": elem_match}).await;

        // Stages that build documents cannot nest them without bound.
        let nesting: Vec<Document> = (0..40)
            .map(|_| doc! {"$addFields": {"v": "$$ROOT"}})
            .collect();
        let (code, errmsg) = fails(
            &db,
            doc! {"aggregate": "c", "pipeline": nesting, "cursor": {}},
        )
        .await;
        assert_eq!((code, errmsg.as_str()), (15, TO_BSON));
        let grouping: Vec<Document> = (0..20)
            .map(|_| doc! {"$group": {"_id": null, "v": {"$push": "$$ROOT"}}})
            .collect();
        let (code, errmsg) = fails(
            &db,
            doc! {"aggregate": "c", "pipeline": grouping, "cursor": {}},
        )
        .await;
        assert_eq!((code, errmsg.as_str()), (15, TO_BSON));
        let stages: Vec<Document> = (0..1001).map(|_| doc! {"$skip": 0}).collect();
        let (code, errmsg) = fails(
            &db,
            doc! {"aggregate": "c", "pipeline": stages, "cursor": {}},
        )
        .await;
        assert_eq!(
            (code, errmsg.as_str()),
            (
                7749501,
                "Pipeline length must be no longer than 1000 stages."
            )
        );
        server.stop().await;
    });
}
