//! The query, update and projection language through the official driver, value for value as
//! mongod answers (expected values from MongoDB's documentation and jstests).

mod common;

use bson::{doc, Document};
use common::{command_error, TestServer};
use futures::TryStreamExt;
use mongodb::Collection;

async fn find(
    collection: &Collection<Document>,
    filter: Document,
    projection: Document,
) -> Vec<Document> {
    collection
        .find(filter)
        .projection(projection)
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap()
}

#[tokio::test]
async fn positional_projection_returns_the_matched_element() {
    let server = TestServer::start().await;
    let db = server.client().database("positional");
    let students = db.collection::<Document>("students");
    students
        .insert_many([
            doc! {"_id": 1, "semester": 1, "grades": [70, 87, 90]},
            doc! {"_id": 2, "semester": 1, "grades": [90, 88, 92]},
            doc! {"_id": 3, "semester": 1, "grades": [85, 100, 90]},
            doc! {"_id": 4, "semester": 2, "grades": [79, 85, 80]},
            doc! {"_id": 5, "semester": 2, "grades": [88, 88, 92]},
            doc! {"_id": 6, "semester": 2, "grades": [95, 90, 96]},
        ])
        .await
        .unwrap();
    // The documentation's example of the positional `$` projection.
    let found = find(
        &students,
        doc! {"semester": 1, "grades": {"$gte": 85}},
        doc! {"grades.$": 1},
    )
    .await;
    assert_eq!(
        found,
        vec![
            doc! {"_id": 1, "grades": [87]},
            doc! {"_id": 2, "grades": [90]},
            doc! {"_id": 3, "grades": [85]},
        ]
    );
    // Across getMore batches too.
    let batched: Vec<Document> = students
        .find(doc! {"grades": {"$gte": 95}})
        .projection(doc! {"grades.$": 1, "_id": 0})
        .batch_size(1)
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap();
    assert_eq!(batched, vec![doc! {"grades": [100]}, doc! {"grades": [95]}]);

    // An array of documents, matched through a dotted path.
    let logins = db.collection::<Document>("users");
    logins
        .insert_one(doc! {"_id": "u", "tokens": [{"hash": "a", "at": 1}, {"hash": "b", "at": 2}]})
        .await
        .unwrap();
    let found = find(&logins, doc! {"tokens.hash": "b"}, doc! {"tokens.$": 1}).await;
    assert_eq!(
        found,
        vec![doc! {"_id": "u", "tokens": [{"hash": "b", "at": 2}]}]
    );

    // No array position from the query: mongod's 51246.
    let (code, name, message) = command_error(
        students
            .find(doc! {"_id": 1})
            .projection(doc! {"grades.$": 1})
            .await,
    );
    assert_eq!((code, name.as_str()), (51246, "Location51246"));
    assert_eq!(
        message,
        "Executor error during find command :: caused by :: positional operator '.$' couldn't find a matching element in the array"
    );

    // findAndModify's `fields` too.
    let reply = db
        .run_command(doc! {
            "findAndModify": "students", "query": {"_id": 4, "grades": 85},
            "update": {"$set": {"seen": true}}, "fields": {"grades.$": 1},
        })
        .await
        .unwrap();
    assert_eq!(
        reply.get_document("value").unwrap(),
        &doc! {"_id": 4, "grades": [85]}
    );
}

#[tokio::test]
async fn an_update_path_with_two_positional_operators_is_refused() {
    let server = TestServer::start().await;
    let db = server.client().database("positional_update");
    let items = db.collection::<Document>("items");
    let original = doc! {"_id": 1, "x": [{"test": [1, 2]}, {"test": [3]}]};
    items.insert_one(original.clone()).await.unwrap();
    let reply = db
        .run_command(doc! {
            "update": "items",
            "updates": [{"q": {"x.test": 2}, "u": {"$set": {"x.$.test.$": 5}}}],
        })
        .await
        .unwrap();
    let errors = reply.get_array("writeErrors").unwrap();
    let error = errors[0].as_document().unwrap();
    assert_eq!(error.get_i32("code").unwrap(), 2);
    assert_eq!(
        error.get_str("errmsg").unwrap(),
        "Too many positional (i.e. '$') elements found in path 'x.$.test.$'"
    );
    assert_eq!(reply.get_i32("nModified").unwrap(), 0);
    let stored = items.find_one(doc! {}).await.unwrap().unwrap();
    assert_eq!(stored, original);
}

#[tokio::test]
async fn bitwise_operators_answer_the_documentation_examples() {
    let server = TestServer::start().await;
    let db = server.client().database("bits");
    let collection = db.collection::<Document>("collection");
    collection
        .insert_many([
            doc! {"_id": 1, "a": 54, "binaryValueofA": "00110110"},
            doc! {"_id": 2, "a": 20, "binaryValueofA": "00010100"},
            doc! {"_id": 3, "a": 20.0, "binaryValueofA": "00010100"},
            doc! {"_id": 4, "a": bson::Binary {subtype: bson::spec::BinarySubtype::Generic, bytes: vec![0x66]}, "binaryValueofA": "01100110"},
        ])
        .await
        .unwrap();
    let ids = |filter: Document| {
        let collection = collection.clone();
        async move {
            find(&collection, filter, doc! {"_id": 1})
                .await
                .into_iter()
                .map(|document| document.get_i32("_id").unwrap())
                .collect::<Vec<i32>>()
        }
    };
    assert_eq!(ids(doc! {"a": {"$bitsAllSet": [1, 5]}}).await, [1, 4]);
    assert_eq!(ids(doc! {"a": {"$bitsAllSet": 50}}).await, [1]);
    assert_eq!(ids(doc! {"a": {"$bitsAllClear": [1, 5]}}).await, [2, 3]);
    assert_eq!(ids(doc! {"a": {"$bitsAllClear": 35}}).await, [2, 3]);
    assert_eq!(ids(doc! {"a": {"$bitsAnySet": [1, 5]}}).await, [1, 4]);
    assert_eq!(ids(doc! {"a": {"$bitsAnySet": 35}}).await, [1, 4]);
    assert_eq!(ids(doc! {"a": {"$bitsAnyClear": [1, 5]}}).await, [2, 3]);
    assert_eq!(ids(doc! {"a": {"$bitsAnyClear": 35}}).await, [1, 2, 3, 4]);
    let (code, _, message) = command_error(collection.find(doc! {"a": {"$bitsAllSet": "x"}}).await);
    assert_eq!(
        (code, message.as_str()),
        (
            2,
            "a takes an Array, a number, or a BinData but received: $bitsAllSet: \"x\""
        )
    );
}
