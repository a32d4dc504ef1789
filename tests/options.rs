//! Every option is honoured or refused: every command that takes a `collation` honours it and
//! refuses an invalid one, and a `hint` that names no usable index is refused as mongod refuses
//! it (2 BadValue `hint provided does not correspond to an existing index`).

mod common;

use bson::{doc, Document};
use common::TestServer;
use mongodb::Database;

const NO_SUCH_INDEX: &str = "hint provided does not correspond to an existing index";

async fn setup() -> (TestServer, Database) {
    let server = TestServer::start().await;
    let db = server.client().database("opts");
    db.run_command(doc! {"insert": "c", "documents": [{"_id": 1, "a": "A"}, {"_id": 2, "a": "a"}]})
        .await
        .unwrap();
    db.run_command(doc! {"createIndexes": "c", "indexes": [
        {"key": {"a": 1}, "name": "a_1"},
        {"key": {"b": 1}, "name": "b_1", "hidden": true},
    ]})
    .await
    .unwrap();
    (server, db)
}

/// Each command that reads with a filter, with `extra` merged into it (or into its statement).
fn commands(extra: Document) -> Vec<(&'static str, Document)> {
    let with = |mut command: Document| {
        command.extend(extra.clone());
        command
    };
    vec![
        ("find", with(doc! {"find": "c", "filter": {"a": "a"}})),
        (
            "aggregate",
            with(doc! {"aggregate": "c", "pipeline": [{"$match": {"a": "a"}}], "cursor": {}}),
        ),
        ("count", with(doc! {"count": "c", "query": {"a": "a"}})),
        ("count all", with(doc! {"count": "c"})),
        (
            "distinct",
            with(doc! {"distinct": "c", "key": "a", "query": {"a": "a"}}),
        ),
        (
            "findAndModify",
            with(doc! {"findAndModify": "c", "query": {"a": "none"}, "update": {"$set": {"x": 1}}}),
        ),
        (
            "update",
            doc! {"update": "c", "updates": [with(doc! {"q": {"a": "none"}, "u": {"$set": {"x": 1}}})]},
        ),
        (
            "delete",
            doc! {"delete": "c", "deletes": [with(doc! {"q": {"a": "none"}, "limit": 1})]},
        ),
    ]
}

/// The (code, errmsg) of a command error, or of a write command's first write error.
async fn refusal(db: &Database, command: Document) -> Option<(i32, String)> {
    match db.run_command(command).await {
        Err(error) => match *error.kind {
            mongodb::error::ErrorKind::Command(ref failure) => {
                Some((failure.code, failure.message.clone()))
            }
            ref other => panic!("unexpected error {other:?}"),
        },
        Ok(reply) => reply.get_array("writeErrors").ok().map(|errors| {
            let error = errors[0].as_document().unwrap();
            (
                error.get_i32("code").unwrap(),
                error.get_str("errmsg").unwrap().to_string(),
            )
        }),
    }
}

#[tokio::test]
async fn every_command_honours_a_collation_and_refuses_an_invalid_one() {
    let (server, db) = setup().await;
    for (what, command) in commands(doc! {"collation": {"locale": "xx"}}) {
        let (code, errmsg) = refusal(&db, command)
            .await
            .unwrap_or_else(|| panic!("{what} accepted it"));
        assert_eq!(code, 2, "{what}: {errmsg}");
        assert!(
            errmsg.starts_with("Field 'locale' is invalid"),
            "{what}: {errmsg}"
        );
    }
    for collation in [
        doc! {"locale": "simple"},
        doc! {"locale": "en", "strength": 2},
    ] {
        for (what, command) in commands(doc! {"collation": collation.clone()}) {
            assert!(refusal(&db, command).await.is_none(), "{what}");
        }
    }
    // "A" and "a" differ in case only: one match under the simple collation, two at strength 2.
    for (collation, n) in [
        (doc! {"locale": "simple"}, 1),
        (doc! {"locale": "en", "strength": 2}, 2),
    ] {
        let reply = db
            .run_command(doc! {"count": "c", "query": {"a": "a"}, "collation": collation})
            .await
            .unwrap();
        assert_eq!(reply.get_i32("n").unwrap(), n);
    }
    server.stop().await;
}

#[tokio::test]
async fn a_hint_must_name_a_usable_index() {
    let (server, db) = setup().await;
    for hint in [
        doc! {"hint": "nope_1"},
        doc! {"hint": {"nope": 1}},
        doc! {"hint": "b_1"},
    ] {
        for (what, command) in commands(hint.clone()) {
            let (code, errmsg) = refusal(&db, command)
                .await
                .unwrap_or_else(|| panic!("{what} accepted {hint}"));
            assert_eq!(code, 2, "{what}: {errmsg}");
            assert!(errmsg.ends_with(NO_SUCH_INDEX), "{what}: {errmsg}");
        }
    }
    for hint in [
        doc! {"hint": "a_1"},
        doc! {"hint": {"a": 1}},
        doc! {"hint": "_id_"},
        doc! {"hint": {"$natural": 1}},
        doc! {"hint": {"$natural": -1}},
    ] {
        for (what, command) in commands(hint.clone()) {
            assert!(
                refusal(&db, command).await.is_none(),
                "{what} refused {hint}"
            );
        }
    }
    // The same documents come back whichever way the hint says to read.
    let hinted = db
        .run_command(doc! {"count": "c", "query": {"a": "a"}, "hint": "a_1"})
        .await
        .unwrap();
    assert_eq!(hinted.get_i32("n"), Ok(1));
    // A missing collection has no plan to refuse.
    db.run_command(doc! {"find": "missing", "hint": "nope_1"})
        .await
        .unwrap();
    let (code, _) = refusal(&db, doc! {"find": "c", "hint": 5}).await.unwrap();
    assert_eq!(code, 9);
    server.stop().await;
}
