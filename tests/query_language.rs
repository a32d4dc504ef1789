//! The query, update and projection language through the official driver, value for value as
//! mongod answers (expected values from MongoDB's documentation and jstests).

mod common;

use bson::{doc, Bson, Document};
use common::{command_error, find_all, first_batch, TestServer};
use futures::TryStreamExt;

/// The `_id`s (Int32) of what `filter` finds, in the order returned.
async fn ids(collection: &mongodb::Collection<Document>, filter: Document) -> Vec<i32> {
    find_all(collection, filter, doc! {"_id": 1})
        .await
        .into_iter()
        .map(|document| document.get_i32("_id").unwrap())
        .collect()
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
    let found = find_all(
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
    let found = find_all(&logins, doc! {"tokens.hash": "b"}, doc! {"tokens.$": 1}).await;
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
    assert_eq!(
        ids(&collection, doc! {"a": {"$bitsAllSet": [1, 5]}}).await,
        [1, 4]
    );
    assert_eq!(ids(&collection, doc! {"a": {"$bitsAllSet": 50}}).await, [1]);
    assert_eq!(
        ids(&collection, doc! {"a": {"$bitsAllClear": [1, 5]}}).await,
        [2, 3]
    );
    assert_eq!(
        ids(&collection, doc! {"a": {"$bitsAllClear": 35}}).await,
        [2, 3]
    );
    assert_eq!(
        ids(&collection, doc! {"a": {"$bitsAnySet": [1, 5]}}).await,
        [1, 4]
    );
    assert_eq!(
        ids(&collection, doc! {"a": {"$bitsAnySet": 35}}).await,
        [1, 4]
    );
    assert_eq!(
        ids(&collection, doc! {"a": {"$bitsAnyClear": [1, 5]}}).await,
        [2, 3]
    );
    assert_eq!(
        ids(&collection, doc! {"a": {"$bitsAnyClear": 35}}).await,
        [1, 2, 3, 4]
    );
    let (code, _, message) = command_error(collection.find(doc! {"a": {"$bitsAllSet": "x"}}).await);
    assert_eq!(
        (code, message.as_str()),
        (
            2,
            "a takes an Array, a number, or a BinData but received: $bitsAllSet: \"x\""
        )
    );
}

/// `updateMany({}, update, {arrayFilters})` through the `update` command; the write errors.
async fn update_all(
    db: &mongodb::Database,
    collection: &str,
    update: Document,
    filters: Vec<Document>,
) -> Document {
    db.run_command(doc! {
        "update": collection,
        "updates": [{"q": {}, "u": update, "multi": true, "arrayFilters": filters}],
    })
    .await
    .unwrap()
}

#[tokio::test]
async fn array_filters_update_the_elements_they_match() {
    let server = TestServer::start().await;
    let db = server.client().database("array_filters");
    let all = |name: &'static str| {
        let collection = db.collection::<Document>(name);
        async move { find_all(&collection, doc! {}, doc! {}).await }
    };

    // The documentation's examples of `$[<identifier>]`.
    let students = db.collection::<Document>("students");
    students
        .insert_many([
            doc! {"_id": 1, "grades": [95, 92, 90]},
            doc! {"_id": 2, "grades": [98, 100, 102]},
            doc! {"_id": 3, "grades": [95, 110, 100]},
        ])
        .await
        .unwrap();
    let reply = update_all(
        &db,
        "students",
        doc! {"$set": {"grades.$[element]": 100}},
        vec![doc! {"element": {"$gte": 100}}],
    )
    .await;
    assert_eq!(
        (
            reply.get_i32("n").unwrap(),
            reply.get_i32("nModified").unwrap()
        ),
        (3, 2)
    );
    assert_eq!(
        all("students").await,
        [
            doc! {"_id": 1, "grades": [95, 92, 90]},
            doc! {"_id": 2, "grades": [98, 100, 100]},
            doc! {"_id": 3, "grades": [95, 100, 100]},
        ]
    );

    let students2 = db.collection::<Document>("students2");
    students2
        .insert_many([
            doc! {"_id": 1, "grades": [{"grade": 80, "mean": 75, "std": 6}, {"grade": 85, "mean": 90, "std": 4}, {"grade": 85, "mean": 85, "std": 6}]},
            doc! {"_id": 2, "grades": [{"grade": 90, "mean": 75, "std": 6}, {"grade": 87, "mean": 90, "std": 3}, {"grade": 85, "mean": 85, "std": 4}]},
        ])
        .await
        .unwrap();
    update_all(
        &db,
        "students2",
        doc! {"$set": {"grades.$[elem].mean": 100}},
        vec![doc! {"elem.grade": {"$gte": 85}}],
    )
    .await;
    assert_eq!(
        all("students2").await,
        [
            doc! {"_id": 1, "grades": [{"grade": 80, "mean": 75, "std": 6}, {"grade": 85, "mean": 100, "std": 4}, {"grade": 85, "mean": 100, "std": 6}]},
            doc! {"_id": 2, "grades": [{"grade": 90, "mean": 100, "std": 6}, {"grade": 87, "mean": 100, "std": 3}, {"grade": 85, "mean": 100, "std": 4}]},
        ]
    );
    // Several conditions on one identifier.
    update_all(
        &db,
        "students2",
        doc! {"$inc": {"grades.$[elem].std": -1}},
        vec![doc! {"elem.grade": {"$gte": 80}, "elem.std": {"$gt": 5}}],
    )
    .await;
    let after = all("students2").await;
    assert_eq!(
        after[0].get_array("grades").unwrap()[0]
            .as_document()
            .unwrap()
            .get_i32("std")
            .unwrap(),
        5
    );
    assert_eq!(
        after[0].get_array("grades").unwrap()[1]
            .as_document()
            .unwrap()
            .get_i32("std")
            .unwrap(),
        4
    );
    assert_eq!(
        after[1].get_array("grades").unwrap()[0]
            .as_document()
            .unwrap()
            .get_i32("std")
            .unwrap(),
        5
    );

    // Nested identifiers.
    let students4 = db.collection::<Document>("students4");
    students4
        .insert_one(doc! {"_id": 1, "grades": [
            {"type": "quiz", "questions": [10, 8, 5]},
            {"type": "quiz", "questions": [8, 9, 6]},
            {"type": "hw", "questions": [5, 4, 3]},
            {"type": "exam", "questions": [25, 10, 23, 0]},
        ]})
        .await
        .unwrap();
    update_all(
        &db,
        "students4",
        doc! {"$inc": {"grades.$[t].questions.$[score]": 2}},
        vec![doc! {"t.type": "quiz"}, doc! {"score": {"$gte": 8}}],
    )
    .await;
    assert_eq!(
        all("students4").await,
        [doc! {"_id": 1, "grades": [
            {"type": "quiz", "questions": [12, 10, 5]},
            {"type": "quiz", "questions": [10, 11, 6]},
            {"type": "hw", "questions": [5, 4, 3]},
            {"type": "exam", "questions": [25, 10, 23, 0]},
        ]}]
    );

    // findAndModify takes them too.
    let reply = db
        .run_command(doc! {
            "findAndModify": "students", "query": {"_id": 1},
            "update": {"$set": {"grades.$[low]": 0}}, "arrayFilters": [{"low": {"$lt": 93}}],
            "new": true,
        })
        .await
        .unwrap();
    assert_eq!(
        reply.get_document("value").unwrap(),
        &doc! {"_id": 1, "grades": [95, 0, 0]}
    );
}

#[tokio::test]
async fn array_filters_are_refused_as_mongod_refuses_them() {
    let server = TestServer::start().await;
    let db = server.client().database("array_filter_errors");
    db.collection::<Document>("c")
        .insert_one(doc! {"_id": 0, "a": [1, 2]})
        .await
        .unwrap();
    let write_error = |update: Document, filters: Vec<Document>| {
        let db = db.clone();
        async move {
            let reply = update_all(&db, "c", update, filters).await;
            let errors = reply.get_array("writeErrors").unwrap();
            let error = errors[0].as_document().unwrap();
            (
                error.get_i32("code").unwrap(),
                error.get_str("errmsg").unwrap().to_string(),
            )
        }
    };
    assert_eq!(
        write_error(doc! {"$set": {"a.$[i]": 5}}, vec![doc! {"i": 0}, doc! {"j": 0}]).await,
        (9, "The array filter for identifier 'j' was not used in the update { $set: { a.$[i]: 5 } }".into())
    );
    assert_eq!(
        write_error(doc! {"$set": {"a.$[i]": 5}}, vec![]).await,
        (
            2,
            "No array filter found for identifier 'i' in path 'a.$[i]'".into()
        )
    );
    assert_eq!(
        write_error(
            doc! {"$set": {"a.$[i]": 5, "a.$[j]": 6}},
            vec![doc! {"i": 0}, doc! {"j": 0}, doc! {"i": 1}]
        )
        .await,
        (
            9,
            "Found multiple array filters with the same top-level field name i".into()
        )
    );
    assert_eq!(
        write_error(doc! {"$set": {"a.$[i]": 5}}, vec![doc! {"i": 0, "j": 0}]).await,
        (9, "Error parsing array filter :: caused by :: Expected a single top-level field name, found 'i' and 'j'".into())
    );
    assert_eq!(
        write_error(doc! {"$set": {"a.$[i]": 5}}, vec![doc! {}]).await,
        (
            9,
            "Cannot use an expression without a top-level field name in arrayFilters".into()
        )
    );
    assert_eq!(
        write_error(doc! {"$set": {"a.$[I]": 5}}, vec![doc! {"I": 0}])
            .await
            .0,
        2
    );
    // Two filters selecting the same element for one field.
    assert_eq!(
        write_error(
            doc! {"$set": {"a.$[i]": 5, "a.$[j]": 6}},
            vec![doc! {"i": 1}, doc! {"j": {"$lt": 2}}]
        )
        .await,
        (40, "Update created a conflict at 'a.0'".into())
    );
    let stored = db
        .collection::<Document>("c")
        .find_one(doc! {})
        .await
        .unwrap()
        .unwrap();
    assert_eq!(stored, doc! {"_id": 0, "a": [1, 2]});
}

#[tokio::test]
async fn pipeline_updates_answer_the_documentation_examples() {
    let server = TestServer::start().await;
    let db = server.client().database("pipeline_updates");
    let date = |iso: &str| bson::DateTime::parse_rfc3339_str(iso).unwrap();

    let students = db.collection::<Document>("students");
    students
        .insert_many([
            doc! {"_id": 1, "test1": 95, "test2": 92, "test3": 90, "modified": date("2020-01-05T00:00:00Z")},
            doc! {"_id": 3, "test1": 95, "test2": 110, "modified": date("2020-01-04T00:00:00Z")},
        ])
        .await
        .unwrap();
    let result = students
        .update_one(
            doc! {"_id": 3},
            vec![doc! {"$set": {"test3": 98, "modified": "$$NOW"}}],
        )
        .await
        .unwrap();
    assert_eq!((result.matched_count, result.modified_count), (1, 1));
    let updated = students.find_one(doc! {"_id": 3}).await.unwrap().unwrap();
    let keys: Vec<&str> = updated.keys().map(String::as_str).collect();
    assert_eq!(keys, ["_id", "test1", "test2", "modified", "test3"]);
    assert_eq!(updated.get_i32("test3").unwrap(), 98);
    // `$$NOW` is the server clock's time when the statement ran (the test server's clock).
    assert_ne!(
        *updated.get_datetime("modified").unwrap(),
        date("2020-01-04T00:00:00Z")
    );

    let students2 = db.collection::<Document>("students2");
    students2
        .insert_many([
            doc! {"_id": 1, "quiz1": 8, "test2": 100, "quiz2": 9, "modified": date("2020-01-05T00:00:00Z")},
            doc! {"_id": 2, "quiz2": 5, "test1": 80, "test2": 89, "modified": date("2020-01-05T00:00:00Z")},
        ])
        .await
        .unwrap();
    students2
        .update_many(
            doc! {},
            vec![
                doc! {"$replaceRoot": {"newRoot": {"$mergeObjects": [{"quiz1": 0, "quiz2": 0, "test1": 0, "test2": 0}, "$$ROOT"]}}},
                doc! {"$set": {"modified": "$$NOW"}},
            ],
        )
        .await
        .unwrap();
    let mut all = find_all(&students2, doc! {}, doc! {"modified": 0}).await;
    assert_eq!(
        all,
        [
            doc! {"_id": 1, "quiz1": 8, "quiz2": 9, "test1": 0, "test2": 100},
            doc! {"_id": 2, "quiz1": 0, "quiz2": 5, "test1": 80, "test2": 89},
        ]
    );

    let students3 = db.collection::<Document>("students3");
    students3
        .insert_many([
            doc! {"_id": 1, "tests": [95, 92, 90]},
            doc! {"_id": 2, "tests": [94, 88, 90]},
            doc! {"_id": 3, "tests": [70, 75, 82]},
        ])
        .await
        .unwrap();
    students3
        .update_many(
            doc! {},
            vec![
                doc! {"$set": {"average": {"$trunc": [{"$avg": "$tests"}, 0]}}},
                doc! {"$set": {"grade": {"$switch": {
                    "branches": [
                        {"case": {"$gte": ["$average", 90]}, "then": "A"},
                        {"case": {"$gte": ["$average", 80]}, "then": "B"},
                        {"case": {"$gte": ["$average", 70]}, "then": "C"},
                        {"case": {"$gte": ["$average", 60]}, "then": "D"},
                    ],
                    "default": "F",
                }}}},
            ],
        )
        .await
        .unwrap();
    all = find_all(&students3, doc! {}, doc! {"tests": 0}).await;
    assert_eq!(
        all,
        [
            doc! {"_id": 1, "average": 92.0, "grade": "A"},
            doc! {"_id": 2, "average": 90.0, "grade": "A"},
            doc! {"_id": 3, "average": 75.0, "grade": "C"},
        ]
    );

    // Upserts run the pipeline on the query's equality fields; findAndModify takes pipelines.
    students3
        .update_one(
            doc! {"_id": 10, "x": 1},
            vec![doc! {"$set": {"y": {"$add": ["$x", 1]}}}],
        )
        .upsert(true)
        .await
        .unwrap();
    assert_eq!(
        students3.find_one(doc! {"_id": 10}).await.unwrap().unwrap(),
        doc! {"_id": 10, "x": 1, "y": 2}
    );
    let reply = db
        .run_command(doc! {
            "findAndModify": "students3", "query": {"_id": 10},
            "update": [{"$unset": "x"}, {"$project": {"y": 1}}], "new": true,
        })
        .await
        .unwrap();
    assert_eq!(
        reply.get_document("value").unwrap(),
        &doc! {"_id": 10, "y": 2}
    );

    // mongod's refusals.
    let write_error = |update: Vec<Document>, filters: Option<Vec<Document>>| {
        let db = db.clone();
        async move {
            let mut statement = doc! {"q": {"_id": 1}, "u": update};
            if let Some(filters) = filters {
                statement.insert("arrayFilters", filters);
            }
            let reply = db
                .run_command(doc! {"update": "students3", "updates": [statement]})
                .await
                .unwrap();
            let error = reply.get_array("writeErrors").unwrap()[0]
                .as_document()
                .unwrap()
                .clone();
            (
                error.get_i32("code").unwrap(),
                error.get_str("errmsg").unwrap().to_string(),
            )
        }
    };
    assert_eq!(
        write_error(vec![doc! {"$match": {}}], None).await,
        (
            72,
            "$match is not allowed to be used within an update".into()
        )
    );
    assert_eq!(
        write_error(vec![doc! {"$set": {"a": 1}}], Some(vec![doc! {"i": 1}])).await,
        (
            9,
            "arrayFilters may not be specified for pipeline-style updates".into()
        )
    );
    assert_eq!(
        write_error(vec![doc! {"$set": {"_id": 5}}], None).await,
        (66, "After applying the update, the (immutable) field '_id' was found to have been altered to _id: 5".into())
    );
}

#[tokio::test]
async fn pull_takes_any_query_condition() {
    let server = TestServer::start().await;
    let db = server.client().database("pull");
    let surveys = db.collection::<Document>("survey");
    // The documentation's examples of $pull.
    surveys
        .insert_many([
            doc! {"_id": 1, "results": [{"item": "A", "score": 5}, {"item": "B", "score": 8}]},
            doc! {"_id": 2, "results": [{"item": "C", "score": 8}, {"item": "B", "score": 4}]},
        ])
        .await
        .unwrap();
    surveys
        .update_many(
            doc! {},
            doc! {"$pull": {"results": {"score": 8, "item": "B"}}},
        )
        .await
        .unwrap();
    assert_eq!(
        find_all(&surveys, doc! {}, doc! {}).await,
        [
            doc! {"_id": 1, "results": [{"item": "A", "score": 5}]},
            doc! {"_id": 2, "results": [{"item": "C", "score": 8}, {"item": "B", "score": 4}]},
        ]
    );
    // Logical operators at the top of the condition are queries on document elements.
    surveys
        .update_many(
            doc! {},
            doc! {"$pull": {"results": {"$or": [{"item": "A"}, {"score": {"$lt": 5}}]}}},
        )
        .await
        .unwrap();
    assert_eq!(
        find_all(&surveys, doc! {}, doc! {}).await,
        [
            doc! {"_id": 1, "results": []},
            doc! {"_id": 2, "results": [{"item": "C", "score": 8}]},
        ]
    );
    let stores = db.collection::<Document>("stores");
    stores
        .insert_one(doc! {"_id": 1, "fruits": ["apples", "pears", "oranges", "grapes", "bananas"], "vegetables": ["carrots", "celery", "squash", "carrots"]})
        .await
        .unwrap();
    stores
        .update_many(
            doc! {},
            doc! {"$pull": {"fruits": {"$in": ["apples", "oranges"]}, "vegetables": "carrots"}},
        )
        .await
        .unwrap();
    assert_eq!(
        find_all(&stores, doc! {}, doc! {}).await,
        [
            doc! {"_id": 1, "fruits": ["pears", "grapes", "bananas"], "vegetables": ["celery", "squash"]}
        ]
    );
    let profiles = db.collection::<Document>("profiles");
    profiles
        .insert_one(doc! {"_id": 1, "votes": [3, 5, 6, 7, 7, 8]})
        .await
        .unwrap();
    profiles
        .update_one(doc! {"_id": 1}, doc! {"$pull": {"votes": {"$gte": 6}}})
        .await
        .unwrap();
    assert_eq!(
        find_all(&profiles, doc! {}, doc! {}).await,
        [doc! {"_id": 1, "votes": [3, 5]}]
    );
}

#[tokio::test]
async fn expr_compares_fields_of_the_same_document() {
    let server = TestServer::start().await;
    let db = server.client().database("expr");
    let budget = db.collection::<Document>("monthlyBudget");
    budget
        .insert_many([
            doc! {"_id": 1, "category": "food", "budget": 400, "spent": 450},
            doc! {"_id": 2, "category": "drinks", "budget": 100, "spent": 150},
            doc! {"_id": 3, "category": "clothes", "budget": 100, "spent": 50},
            doc! {"_id": 4, "category": "misc", "budget": 500, "spent": 300},
            doc! {"_id": 5, "category": "travel", "budget": 200, "spent": 650},
        ])
        .await
        .unwrap();
    // The documentation's example, then with other predicates around it.
    assert_eq!(
        ids(&budget, doc! {"$expr": {"$gt": ["$spent", "$budget"]}}).await,
        [1, 2, 5]
    );
    assert_eq!(
        ids(
            &budget,
            doc! {"$expr": {"$gt": ["$spent", "$budget"]}, "budget": {"$gte": 200}}
        )
        .await,
        [1, 5]
    );
    assert_eq!(
        ids(
            &budget,
            doc! {"$or": [{"$expr": {"$eq": ["$spent", 50]}}, {"_id": 4}]}
        )
        .await,
        [3, 4]
    );
    assert_eq!(
        budget
            .count_documents(doc! {"$expr": {"$lt": ["$spent", "$budget"]}})
            .await
            .unwrap(),
        2
    );
    let aggregated: Vec<Document> = budget
        .aggregate([doc! {"$match": {"$expr": {"$gt": ["$spent", {"$multiply": ["$budget", 2]}]}}}])
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap();
    assert_eq!(aggregated.len(), 1);
    assert_eq!(aggregated[0].get_i32("_id").unwrap(), 5);
    // Updates select with it too.
    let result = budget
        .update_many(
            doc! {"$expr": {"$gt": ["$spent", "$budget"]}},
            doc! {"$set": {"over": true}},
        )
        .await
        .unwrap();
    assert_eq!(result.modified_count, 3);

    // Conditional expressions (the documentation's discounted-price example).
    let supplies = db.collection::<Document>("supplies");
    let decimal = |text: &str| Bson::Decimal128(text.parse().unwrap());
    supplies
        .insert_many([
            doc! {"_id": 1, "item": "binder", "qty": 100, "price": decimal("12")},
            doc! {"_id": 2, "item": "notebook", "qty": 200, "price": decimal("8")},
            doc! {"_id": 3, "item": "pencil", "qty": 50, "price": decimal("6")},
            doc! {"_id": 4, "item": "eraser", "qty": 150, "price": decimal("3")},
            doc! {"_id": 5, "item": "legal pad", "qty": 42, "price": decimal("10")},
        ])
        .await
        .unwrap();
    let discounted = doc! {"$cond": {
        "if": {"$gte": ["$qty", 100]},
        "then": {"$multiply": ["$price", decimal("0.50")]},
        "else": {"$multiply": ["$price", decimal("0.75")]},
    }};
    let found = find_all(
        &supplies,
        doc! {"$expr": {"$lt": [discounted, decimal("5")]}},
        doc! {"item": 1},
    )
    .await;
    assert_eq!(
        found,
        [
            doc! {"_id": 2, "item": "notebook"},
            doc! {"_id": 3, "item": "pencil"},
            doc! {"_id": 4, "item": "eraser"},
        ]
    );

    // An expression that fails fails the query, as on mongod (never an empty answer).
    let result = supplies
        .find(doc! {"$expr": {"$gt": [{"$add": ["$item", 1]}, 0]}})
        .await;
    let error = match result {
        Ok(mut cursor) => cursor.try_next().await.map(|_| ()),
        Err(error) => Err(error),
    };
    let (code, _, _) = command_error(error);
    assert_ne!(code, 0);
    // ... with mongod's executor context (find, then getMore).
    let (code, _, message) = command_error(
        db.run_command(doc! {"find": "supplies", "filter": {"$expr": {"$divide": [1, {"$subtract": ["$_id", "$_id"]}]}}})
            .await,
    );
    assert_eq!(
        (code, message.as_str()),
        (
            16608,
            "Executor error during find command :: caused by :: can't $divide by zero"
        )
    );
    // Where an expression belongs only at the top of a query.
    let (code, _, _) = command_error(supplies.find(doc! {"qty": {"$expr": 1}}).await);
    assert_eq!(code, 2);
    for (operator, argument) in [
        ("$expr", Bson::Boolean(true)),
        ("$sampleRate", Bson::Double(0.5)),
    ] {
        let (code, _, message) = command_error(
            supplies
                .find(doc! {"tags": {"$elemMatch": {operator: argument}}})
                .await,
        );
        assert_eq!(
            (code, message),
            (
                2,
                format!("{operator} can only be applied to the top-level document")
            )
        );
    }
}

#[tokio::test]
async fn sample_rate_and_dbref_fields() {
    let server = TestServer::start().await;
    let db = server.client().database("sample");
    let items = db.collection::<Document>("items");
    items
        .insert_many((0..1000).map(|i| doc! {"_id": i, "even": i % 2 == 0}))
        .await
        .unwrap();
    let count = |filter: Document| {
        let items = items.clone();
        async move { items.count_documents(filter).await.unwrap() }
    };
    assert_eq!(count(doc! {"$sampleRate": 0}).await, 0);
    assert_eq!(count(doc! {"$sampleRate": 1}).await, 1000);
    // Each document with probability 0.5: 500 expected, a standard deviation of about 16.
    let sampled = count(doc! {"$sampleRate": 0.5}).await;
    assert!((350..=650).contains(&sampled), "{sampled}");
    let sampled_even = count(doc! {"$sampleRate": 0.5, "even": true}).await;
    assert!(sampled_even <= 500, "{sampled_even}");
    for (rate, message) in [
        (
            Bson::String("x".into()),
            "argument to $sampleRate must be a numeric type",
        ),
        (
            Bson::Double(1.5),
            "numeric argument to $sampleRate must be in [0, 1]",
        ),
    ] {
        let (code, _, text) = command_error(items.find(doc! {"$sampleRate": rate}).await);
        assert_eq!((code, text.as_str()), (2, message));
    }

    // `$elemMatch` on DBRef fields.
    let posts = db.collection::<Document>("posts");
    posts
        .insert_many([
            doc! {"_id": 1, "authors": [{"$ref": "users", "$id": 5}, {"$ref": "users", "$id": 7}]},
            doc! {"_id": 2, "authors": [{"$ref": "admins", "$id": 5}]},
        ])
        .await
        .unwrap();
    let found = find_all(
        &posts,
        doc! {"authors": {"$elemMatch": {"$ref": "users", "$id": 5}}},
        doc! {"_id": 1},
    )
    .await;
    assert_eq!(found, [doc! {"_id": 1}]);
    let found = find_all(&posts, doc! {"authors.$id": 5}, doc! {"_id": 1}).await;
    assert_eq!(found, [doc! {"_id": 1}, doc! {"_id": 2}]);
}

#[tokio::test]
async fn json_schema_answers_the_documentation_example() {
    let server = TestServer::start().await;
    let db = server.client().database("schema");
    let inventory = db.collection::<Document>("inventory");
    // mongosh stores its numbers as doubles, NumberInt as int32.
    inventory
        .insert_many([
            doc! {"_id": 1, "item": "journal", "qty": 25, "size": {"h": 14.0, "w": 21.0, "uom": "cm"}, "instock": true},
            doc! {"_id": 2, "item": "notebook", "qty": 50, "size": {"h": 8.5, "w": 11.0, "uom": "in"}, "instock": true},
            doc! {"_id": 3, "item": "paper", "qty": 100, "size": {"h": 8.5, "w": 11.0, "uom": "in"}, "instock": 1.0},
            doc! {"_id": 4, "item": "planner", "qty": 75, "size": {"h": 22.85, "w": 30.0, "uom": "cm"}, "instock": 1.0},
            doc! {"_id": 5, "item": "postcard", "qty": 45, "size": {"h": 10.0, "w": 15.25, "uom": "cm"}, "instock": true},
            doc! {"_id": 6, "item": "apple", "qty": 45, "status": "A", "instock": true},
            doc! {"_id": 7, "item": "pears", "qty": 50, "status": "A", "instock": true},
        ])
        .await
        .unwrap();
    let schema = doc! {
        "required": ["item", "qty", "instock"],
        "properties": {
            "item": {"bsonType": "string"},
            "qty": {"bsonType": "int"},
            "size": {
                "bsonType": "object",
                "required": ["uom"],
                "properties": {"uom": {"bsonType": "string"}, "h": {"bsonType": "double"}, "w": {"bsonType": "double"}},
            },
            "instock": {"bsonType": "bool"},
        },
    };
    assert_eq!(
        ids(&inventory, doc! {"$jsonSchema": schema.clone()}).await,
        [1, 2, 5, 6, 7]
    );
    assert_eq!(
        ids(&inventory, doc! {"$nor": [{"$jsonSchema": schema.clone()}]}).await,
        [3, 4]
    );
    assert_eq!(
        ids(&inventory, doc! {"$jsonSchema": schema, "qty": {"$gt": 45}}).await,
        [2, 7]
    );
    let (code, _, message) = command_error(
        inventory
            .find(doc! {"$jsonSchema": {"bsonType": "object", "foo": 1}})
            .await,
    );
    assert_eq!(
        (code, message.as_str()),
        (9, "Unknown $jsonSchema keyword: foo")
    );
}

#[tokio::test]
async fn type_and_mod_answer_the_documentation_examples() {
    let server = TestServer::start().await;
    let db = server.client().database("type_mod");
    let book = db.collection::<Document>("addressBook");
    book.insert_many([
        doc! {"_id": 1, "address": "2030 Martian Way", "zipCode": "90698345"},
        doc! {"_id": 2, "address": "156 Lunar Place", "zipCode": 43339374.0},
        doc! {"_id": 3, "address": "2324 Pluto Place", "zipCode": 3921412_i64},
        doc! {"_id": 4, "address": "55 Saturn Ring", "zipCode": 88602117},
        doc! {"_id": 5, "address": "104 Venus Drive", "zipCode": ["834847278", "1893289032"]},
    ])
    .await
    .unwrap();
    for (selector, expected) in [
        (Bson::Int32(2), vec![1, 5]),
        (Bson::String("string".into()), vec![1, 5]),
        (Bson::Int32(1), vec![2]),
        (Bson::String("double".into()), vec![2]),
        (Bson::String("long".into()), vec![3]),
        (Bson::String("int".into()), vec![4]),
        (Bson::String("number".into()), vec![2, 3, 4]),
        (Bson::String("array".into()), vec![5]),
        (
            Bson::Array(vec!["string".into(), "int".into()]),
            vec![1, 4, 5],
        ),
    ] {
        assert_eq!(
            ids(&book, doc! {"zipCode": {"$type": selector.clone()}}).await,
            expected,
            "$type {selector}"
        );
    }
    let (code, _, message) = command_error(book.find(doc! {"zipCode": {"$type": "bogus"}}).await);
    assert_eq!(
        (code, message.as_str()),
        (2, "Unknown type name alias: bogus")
    );

    let inventory = db.collection::<Document>("inventory");
    inventory
        .insert_many([
            doc! {"_id": 1, "item": "abc123", "qty": 0},
            doc! {"_id": 2, "item": "xyz123", "qty": 5},
            doc! {"_id": 3, "item": "ijk123", "qty": 12},
        ])
        .await
        .unwrap();
    assert_eq!(
        ids(&inventory, doc! {"qty": {"$mod": [4, 0]}}).await,
        [1, 3]
    );
    // Floating-point divisors and remainders are truncated toward zero.
    for divisor in [4.0, 4.5, 4.99] {
        assert_eq!(
            ids(&inventory, doc! {"qty": {"$mod": [divisor, 0]}}).await,
            [1, 3],
            "divisor {divisor}"
        );
    }
    for (argument, message) in [
        (
            Bson::Array(vec![4.into()]),
            "malformed mod, not enough elements",
        ),
        (Bson::Array(vec![]), "malformed mod, not enough elements"),
        (
            Bson::Array(vec![4.into(), 1.into(), 2.into(), 3.into()]),
            "malformed mod, too many elements",
        ),
    ] {
        let (code, _, text) = command_error(inventory.find(doc! {"qty": {"$mod": argument}}).await);
        assert_eq!((code, text.as_str()), (2, message));
    }
}

/// The documentation's `let` examples (find, aggregate, update, delete, findAndModify; the
/// update statement's `c` constants) on its `cakeFlavors` collection.
#[tokio::test]
async fn let_variables_and_update_constants_reach_every_expression() {
    let server = TestServer::start().await;
    let db = server.client().database("let_variables");
    let flavors = db.collection::<Document>("cakeFlavors");
    flavors
        .insert_many([
            doc! {"_id": 1, "flavor": "chocolate"},
            doc! {"_id": 2, "flavor": "strawberry"},
            doc! {"_id": 3, "flavor": "cherry"},
        ])
        .await
        .unwrap();
    let matching = doc! {"$expr": {"$eq": ["$flavor", "$$targetFlavor"]}};
    let found = db
        .run_command(doc! {"find": "cakeFlavors", "filter": matching.clone(),
        "projection": {"_id": 0}, "let": {"targetFlavor": "chocolate"}})
        .await
        .unwrap();
    assert_eq!(first_batch(&found), vec![doc! {"flavor": "chocolate"}]);
    let aggregated = db
        .run_command(doc! {"aggregate": "cakeFlavors", "pipeline": [
            {"$match": {"$expr": {"$ne": ["$flavor", "$$skip"]}}},
            {"$project": {"_id": 0, "label": {"$concat": ["$$prefix", "$flavor"]}}},
        ], "cursor": {}, "let": {"skip": "cherry", "prefix": "cake: "}})
        .await
        .unwrap();
    assert_eq!(
        first_batch(&aggregated),
        vec![
            doc! {"label": "cake: chocolate"},
            doc! {"label": "cake: strawberry"}
        ]
    );
    // update with `let`: cherry becomes orange.
    let updated = db
        .run_command(doc! {"update": "cakeFlavors", "updates": [
            {"q": matching.clone(), "u": [{"$set": {"flavor": "$$newFlavor"}}]}
        ], "let": {"targetFlavor": "cherry", "newFlavor": "orange"}})
        .await
        .unwrap();
    assert_eq!(
        (updated.get_i32("n"), updated.get_i32("nModified")),
        (Ok(1), Ok(1))
    );
    // update with the statement's constants `c`: chocolate becomes vanilla.
    db.run_command(doc! {"update": "cakeFlavors", "updates": [
        {"q": matching.clone(), "u": [{"$set": {"flavor": "$$newFlavor"}}],
         "c": {"targetFlavor": "chocolate", "newFlavor": "vanilla"}}
    ]})
    .await
    .unwrap();
    // delete with `let`: strawberry goes.
    let deleted = db
        .run_command(
            doc! {"delete": "cakeFlavors", "deletes": [{"q": matching.clone(), "limit": 1}],
            "let": {"targetFlavor": "strawberry"}},
        )
        .await
        .unwrap();
    assert_eq!(deleted.get_i32("n"), Ok(1));
    // findAndModify with `let`: orange is replaced.
    let modified = db
        .run_command(
            doc! {"findAndModify": "cakeFlavors", "query": matching.clone(),
            "update": {"flavor": "lemon"}, "new": true,
            "let": {"targetFlavor": "orange"}},
        )
        .await
        .unwrap();
    assert_eq!(
        modified.get_document("value").unwrap(),
        &doc! {"_id": 3, "flavor": "lemon"}
    );
    assert_eq!(
        common::find_all(&flavors, doc! {}, doc! {}).await,
        vec![
            doc! {"_id": 1, "flavor": "vanilla"},
            doc! {"_id": 3, "flavor": "lemon"}
        ]
    );

    // A `let` may not read documents; `c` needs a pipeline update; names must be defined.
    let (code, _, _) = command_error(
        db.run_command(doc! {"find": "cakeFlavors", "let": {"x": "$flavor"}})
            .await,
    );
    assert_eq!(code, 4890500);
    let (code, _, _) = command_error(
        db.run_command(doc! {"find": "cakeFlavors", "filter": {"$expr": "$$nope"}})
            .await,
    );
    assert_eq!(code, 17276);
    let reply = db
        .run_command(doc! {"update": "cakeFlavors", "updates": [
            {"q": {}, "u": {"$set": {"x": 1}}, "c": {"x": 1}}
        ]})
        .await
        .unwrap();
    let error = reply.get_array("writeErrors").unwrap()[0]
        .as_document()
        .unwrap()
        .clone();
    assert_eq!(error.get_i32("code"), Ok(51198));
}

/// jstests/core/field_name_validation.js: which `$`-prefixed and dotted field names inserts,
/// replacements, operator updates, pipeline updates and upserts store (MongoDB 5.0+ rules).
#[tokio::test]
async fn dollar_prefixed_and_dotted_field_names_follow_the_storage_rules() {
    let server = TestServer::start().await;
    let db = server.client().database("field_names");
    let coll = db.collection::<Document>("c");
    let write_code = |reply: Document| -> Option<i32> {
        reply
            .get_array("writeErrors")
            .ok()
            .map(|errors| errors[0].as_document().unwrap().get_i32("code").unwrap())
    };
    let insert = |document: Document| {
        let db = db.clone();
        async move {
            let reply = db
                .run_command(doc! {"insert": "c", "documents": [document]})
                .await
                .unwrap();
            write_code(reply)
        }
    };
    // Inserts: dotted and `$`-prefixed names are stored, at the top level and nested.
    for document in [
        doc! {"a.b": 1},
        doc! {"_id.a": 1},
        doc! {"a": {"a.b": 1}},
        doc! {"_id": {"a.b": 1}},
        doc! {"a": {"$b": 1}},
        doc! {"a": {"_id": {"$b": 1}}},
        doc! {"$a": 1},
        doc! {"valid": 1, "$a": 1},
        doc! {"$a": {"$b": 1}},
        doc! {"$ref": 1},
        doc! {"$id": 1},
        doc! {"$db": 1},
        doc! {"_id": 0, "$valid": 1, "a": 1},
    ] {
        assert_eq!(insert(document.clone()).await, None, "{document}");
    }
    assert_eq!(coll.count_documents(doc! {"a.$b": 1}).await.unwrap(), 1);
    assert_eq!(
        coll.find_one(doc! {"_id": 0}).await.unwrap(),
        Some(doc! {"_id": 0, "$valid": 1, "a": 1})
    );
    // ... except inside `_id`.
    assert_eq!(insert(doc! {"_id": {"$b": 1}}).await, Some(52));
    assert_eq!(insert(doc! {"_id": {"a": 1, "$b": 1}}).await, Some(52));

    coll.drop().await.unwrap();
    let update = |q: Document, u: Bson, upsert: bool| {
        let db = db.clone();
        async move {
            let reply = db
                .run_command(doc! {"update": "c", "updates": [{"q": q, "u": u, "upsert": upsert}]})
                .await
                .unwrap();
            write_code(reply)
        }
    };
    // A dotted name in a replacement is a field; in `$set`, a path.
    assert_eq!(
        update(doc! {}, Bson::Document(doc! {"a.b": 1}), true).await,
        None
    );
    assert_eq!(coll.count_documents(doc! {"a.b": 1}).await.unwrap(), 0);
    assert_eq!(
        update(doc! {}, Bson::Document(doc! {"$set": {"a.b": 1}}), true).await,
        None
    );
    assert_eq!(coll.count_documents(doc! {"a.b": 1}).await.unwrap(), 1);
    assert_eq!(
        update(
            doc! {"a.b": 1},
            Bson::Document(doc! {"$set": {"a.b": 2}}),
            false
        )
        .await,
        None
    );
    assert_eq!(coll.count_documents(doc! {"a": {"b": 2}}).await.unwrap(), 1);
    assert_eq!(
        update(doc! {"a.b": 2}, Bson::Document(doc! {"a.b": 3}), false).await,
        None
    );
    assert_eq!(coll.count_documents(doc! {"a.b": 3}).await.unwrap(), 0);
    // Upserted `_id`s may not hold `$`-prefixed fields.
    for u in [
        doc! {"_id": {"$invalid": 1}},
        doc! {"$set": {"_id": {"$invalid": 1}}},
        doc! {"$setOnInsert": {"_id": {"$invalid": 1}}},
    ] {
        assert_eq!(
            update(doc! {"a.b": 1}, Bson::Document(u.clone()), true).await,
            Some(52),
            "{u}"
        );
    }
    // Replacements may nest `$`-prefixed fields, but not at the top level (9).
    assert_eq!(
        update(
            doc! {"a.b": 1},
            Bson::Document(doc! {"a": {"$c": 1}}),
            false
        )
        .await,
        None
    );
    assert_eq!(
        update(doc! {"a.b": 2}, Bson::Document(doc! {"a": {"$c": 1}}), true).await,
        None
    );
    for top_level in [
        doc! {"$c": 1},
        doc! {"$ref": 1},
        doc! {"$id": 1},
        doc! {"$db": 1},
    ] {
        assert_eq!(
            update(doc! {"a.b": 1}, Bson::Document(top_level.clone()), false).await,
            Some(9),
            "{top_level}"
        );
    }
    // Pipeline updates store `$`-prefixed fields, top-level ones included.
    assert_eq!(
        update(
            doc! {"a.b": 1},
            Bson::Array(vec![Bson::Document(
                doc! {"$replaceWith": {"$literal": {"$a": 1}}}
            )]),
            false
        )
        .await,
        None
    );
    assert_eq!(
        update(
            doc! {"a.b": 4},
            Bson::Array(vec![Bson::Document(
                doc! {"$replaceWith": {"$literal": {"$ref": 1}}}
            )]),
            true
        )
        .await,
        None
    );
    // findAndModify: a top-level `$` field in a replacement or a `$set` fails.
    coll.drop().await.unwrap();
    coll.insert_one(doc! {"_id": 1}).await.unwrap();
    for update in [
        doc! {"_id": 1, "$invalid": 1},
        doc! {"$set": {"_id": 1, "$invalid": 1}},
    ] {
        assert!(
            db.run_command(
                doc! {"findAndModify": "c", "query": {"_id": 1}, "update": update.clone()}
            )
            .await
            .is_err(),
            "{update}"
        );
    }
    db.run_command(
        doc! {"findAndModify": "c", "query": {"_id": 1}, "update": {"_id": 1, "a": {"$ref": 1}}},
    )
    .await
    .unwrap();
    assert_eq!(
        coll.find_one(doc! {"_id": 1}).await.unwrap(),
        Some(doc! {"_id": 1, "a": {"$ref": 1}})
    );
    // The documentation's `$getField`/`$literal` access to a top-level `$` field.
    coll.insert_one(doc! {"_id": 2, "part": "AB305", "$bin": 200, "quantity": 100})
        .await
        .unwrap();
    db.run_command(doc! {"findAndModify": "c",
    "query": {"$expr": {"$eq": [{"$getField": {"$literal": "$bin"}}, 200]}},
    "update": {"$inc": {"quantity": 10}}})
        .await
        .unwrap();
    assert_eq!(
        coll.find_one(doc! {"_id": 2})
            .await
            .unwrap()
            .unwrap()
            .get_i32("quantity"),
        Ok(110)
    );
    // Aggregation stages name no `$`-prefixed output fields, and accumulators no dotted ones.
    for pipeline in [
        vec![doc! {"$match": {"$invalid": 1}}],
        vec![doc! {"$project": {"_id.a": 1, "$newField": {"$multiply": ["$_id.b", "$_id.a"]}}}],
        vec![doc! {"$addFields": {"_id.a": 1, "$newField": {"$multiply": ["$_id.b", "$_id.a"]}}}],
        vec![doc! {"$group": {"_id": "$_id.a", "$invalid": {"$sum": "$_id.b"}}}],
        vec![doc! {"$group": {"_id": "$_id.a", "e.f": {"$sum": "$_id.b"}}}],
    ] {
        assert!(
            db.run_command(doc! {"aggregate": "c", "pipeline": pipeline.clone(), "cursor": {}})
                .await
                .is_err(),
            "{pipeline:?}"
        );
    }
}

/// `$$NOW` in a filter's `$expr` and in `let` is the command's time on the server clock (the
/// test server's manual clock), as in a pipeline.
#[tokio::test]
async fn now_in_expr_and_let_is_the_server_clock() {
    let server = TestServer::start().await;
    let db = server.client().database("now");
    let coll = db.collection::<Document>("c");
    coll.insert_one(doc! {"_id": 1}).await.unwrap();
    let clock = bson::DateTime::from_millis(1_700_000_000_000);
    assert_eq!(
        coll.count_documents(doc! {"$expr": {"$eq": ["$$NOW", clock]}})
            .await
            .unwrap(),
        1
    );
    let found = db
        .run_command(
            doc! {"find": "c", "filter": {"$expr": {"$eq": ["$$when", clock]}},
            "let": {"when": "$$NOW"}},
        )
        .await
        .unwrap();
    assert_eq!(first_batch(&found).len(), 1);
}

/// An expression error met by a `getMore` carries mongod's getMore executor context.
#[tokio::test]
async fn expression_errors_in_get_more_name_the_get_more() {
    let server = TestServer::start().await;
    let db = server.client().database("get_more_errors");
    let documents: Vec<Document> = (1..=1000).map(|id| doc! {"_id": id}).collect();
    db.collection::<Document>("c")
        .insert_many(documents)
        .await
        .unwrap();
    // 10 / (1000 - _id) is positive until the last document, which divides by zero.
    let opened = db
        .run_command(doc! {"find": "c", "batchSize": 1, "filter":
        {"$expr": {"$gt": [{"$divide": [10, {"$subtract": [1000, "$_id"]}]}, 0]}}})
        .await
        .unwrap();
    let cursor = opened.get_document("cursor").unwrap();
    assert_eq!(cursor.get_array("firstBatch").unwrap().len(), 1);
    let (code, _, message) = command_error(
        db.run_command(doc! {"getMore": cursor.get_i64("id").unwrap(), "collection": "c"})
            .await,
    );
    assert_eq!(
        (code, message.as_str()),
        (
            16608,
            "Executor error during getMore :: caused by :: can't $divide by zero"
        )
    );
}

/// The documentation's "aggregation expressions in a find projection" example (Project Fields
/// to Return from Query), through `find` and `findAndModify`.
#[tokio::test]
async fn find_projections_evaluate_aggregation_expressions() {
    let server = TestServer::start().await;
    let db = server.client().database("projection_expressions");
    let inventory = db.collection::<Document>("inventory");
    inventory
        .insert_many([
            doc! {"_id": 1, "item": "journal", "status": "A", "size": {"h": 14, "w": 21, "uom": "cm"}},
            doc! {"_id": 2, "item": "notebook", "status": "A", "size": {"h": 8.5, "w": 11, "uom": "in"}},
            doc! {"_id": 3, "item": "paper", "status": "D", "size": {"h": 8.5, "w": 11, "uom": "in"}},
            doc! {"_id": 4, "item": "postcard", "status": "A", "size": {"h": 10, "w": 15.25, "uom": "cm"}},
        ])
        .await
        .unwrap();
    let projection = doc! {
        "_id": 0,
        "item": 1,
        "status": {"$switch": {"branches": [
            {"case": {"$eq": ["$status", "A"]}, "then": "Available"},
            {"case": {"$eq": ["$status", "D"]}, "then": "Discontinued"},
        ], "default": "No status found"}},
        "area": {"$concat": [{"$toString": {"$multiply": ["$size.h", "$size.w"]}}, " ", "$size.uom"]},
        "reportNumber": {"$literal": 1},
    };
    assert_eq!(
        find_all(&inventory, doc! {}, projection.clone()).await,
        vec![
            doc! {"item": "journal", "status": "Available", "area": "294 cm", "reportNumber": 1},
            doc! {"item": "notebook", "status": "Available", "area": "93.5 in", "reportNumber": 1},
            doc! {"item": "paper", "status": "Discontinued", "area": "93.5 in", "reportNumber": 1},
            doc! {"item": "postcard", "status": "Available", "area": "152.5 cm", "reportNumber": 1},
        ]
    );
    // `$slice` of an expression is the aggregation operator; `let` variables reach projections.
    let found = db
        .run_command(doc! {"find": "inventory", "filter": {"_id": 1},
        "projection": {"_id": 0, "first": {"$slice": [["$item", "$status"], 1]}, "tag": "$$tag"},
        "let": {"tag": "t"}})
        .await
        .unwrap();
    assert_eq!(
        first_batch(&found),
        vec![doc! {"first": ["journal"], "tag": "t"}]
    );
    let modified = db
        .run_command(doc! {"findAndModify": "inventory", "query": {"_id": 3},
        "update": {"$set": {"status": "A"}}, "new": true,
        "fields": {"_id": 0, "label": {"$toUpper": "$item"}}})
        .await
        .unwrap();
    assert_eq!(
        modified.get_document("value").unwrap(),
        &doc! {"label": "PAPER"}
    );
    // An expression in an exclusion projection is mongod's error.
    let (code, _, _) = command_error(
        inventory
            .find(doc! {})
            .projection(doc! {"item": 0, "x": {"$toUpper": "$item"}})
            .await,
    );
    assert_eq!(code, 2);
}
