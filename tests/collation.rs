//! Collation through the official driver: collection defaults, indexes, every command that takes
//! `collation`, and the planner's rule that an index serves a query only under its collation.
//! Expected values come from jstests/core/collation.js and MongoDB's collation reference page.

mod common;

use bson::{doc, Bson, Document};
use common::{command_error, first_batch, TestServer};
use mongodb::options::Collation;
use mongodb::Database;

/// The stage names of an explain's winning plan, outermost first (`FETCH IXSCAN`).
fn winning_stages(explain: &Document) -> Vec<String> {
    let mut stages = Vec::new();
    let mut stage = explain
        .get_document("queryPlanner")
        .and_then(|planner| planner.get_document("winningPlan"))
        .ok();
    while let Some(current) = stage {
        if let Ok(name) = current.get_str("stage") {
            stages.push(name.to_string());
        }
        stage = current.get_document("inputStage").ok();
    }
    stages
}

async fn explain_find(db: &Database, collection: &str, find: Document) -> Vec<String> {
    let mut command = doc! {"find": collection};
    command.extend(find);
    let explain = db
        .run_command(doc! {"explain": command, "verbosity": "queryPlanner"})
        .await
        .unwrap();
    winning_stages(&explain)
}

async fn run(db: &Database, command: Document) -> Document {
    db.run_command(command).await.unwrap()
}

fn case_insensitive() -> Document {
    doc! {"locale": "en_US", "strength": 2}
}

#[tokio::test]
async fn collection_default_collation_is_validated_resolved_and_listed() {
    let server = TestServer::start().await;
    let db = server.client().database("collation_create");
    // jstests/core/collation.js: each of these is refused.
    for bad in [
        Bson::String("not an object".into()),
        Bson::Document(doc! {}),
        Bson::Document(doc! {"blah": 1}),
        Bson::Document(doc! {"locale": "en", "blah": 1}),
        Bson::Document(doc! {"locale": "xx"}),
        Bson::Document(doc! {"locale": "en", "strength": 99}),
        Bson::Document(doc! {"locale": "en", "strength": 9.9}),
    ] {
        assert!(
            db.run_command(doc! {"create": "c", "collation": bad.clone()})
                .await
                .is_err(),
            "{bad:?}"
        );
    }
    let (code, name, _) = command_error(
        db.run_command(
            doc! {"create": "c", "collation": {"locale": "en", "version": "unknownVersion"}},
        )
        .await,
    );
    assert_eq!((code, name.as_str()), (161, "IncompatibleCollationVersion"));

    // The simple collation is not stored.
    run(
        &db,
        doc! {"create": "simple", "collation": {"locale": "simple"}},
    )
    .await;
    let infos = run(
        &db,
        doc! {"listCollections": 1, "filter": {"name": "simple"}},
    )
    .await;
    let options = first_batch(&infos)[0]
        .get_document("options")
        .unwrap()
        .clone();
    assert!(!options.contains_key("collation"));

    // Every collation field is filled in, the locale's defaults included.
    run(
        &db,
        doc! {"create": "french", "collation": {"locale": "fr_CA"}},
    )
    .await;
    let infos = run(
        &db,
        doc! {"listCollections": 1, "filter": {"name": "french"}},
    )
    .await;
    let collation = first_batch(&infos)[0]
        .get_document("options")
        .unwrap()
        .get_document("collation")
        .unwrap()
        .clone();
    let mut without_version = collation.clone();
    assert!(without_version.remove("version").is_some());
    assert_eq!(
        without_version,
        doc! {
            "locale": "fr_CA", "caseLevel": false, "caseFirst": "off", "strength": 3,
            "numericOrdering": false, "alternate": "non-ignorable", "maxVariable": "punct",
            "normalization": false, "backwards": true,
        }
    );
    // The collation listed is accepted back as it is (its version included).
    run(
        &db,
        doc! {"create": "again", "collation": collation.clone()},
    )
    .await;

    // An index without collation inherits the default; an explicit one (simple included) wins.
    let french = db.collection::<Document>("french");
    run(
        &db,
        doc! {"createIndexes": "french", "indexes": [
            {"key": {"a": 1}, "name": "a_1"},
            {"key": {"b": 1}, "name": "b_1", "collation": {"locale": "en_US"}},
            {"key": {"d": 1}, "name": "d_1", "collation": {"locale": "simple"}},
        ]},
    )
    .await;
    let indexes: Vec<Document> = {
        use futures::TryStreamExt;
        french
            .list_indexes()
            .await
            .unwrap()
            .try_collect::<Vec<_>>()
            .await
            .unwrap()
            .into_iter()
            .map(|model| {
                let mut spec = doc! {"key": model.keys};
                if let Some(options) = model.options {
                    if let Some(collation) = options.collation {
                        spec.insert("collation", bson::to_document(&collation).unwrap());
                    }
                }
                spec
            })
            .collect()
    };
    let collation_of = |key: Document| -> Option<String> {
        indexes
            .iter()
            .find(|spec| spec.get_document("key").unwrap() == &key)
            .and_then(|spec| spec.get_document("collation").ok())
            .map(|collation| collation.get_str("locale").unwrap().to_string())
    };
    assert_eq!(collation_of(doc! {"a": 1}).as_deref(), Some("fr_CA"));
    assert_eq!(collation_of(doc! {"b": 1}).as_deref(), Some("en_US"));
    assert_eq!(collation_of(doc! {"d": 1}), None);

    // A hashed index inherits the collation too: equality under it finds both cases.
    run(
        &db,
        doc! {"create": "hashed_ci", "collation": case_insensitive()},
    )
    .await;
    let hashed = db.collection::<Document>("hashed_ci");
    hashed
        .insert_many([doc! {"_id": 1, "h": "Ann"}, doc! {"_id": 2, "h": "bob"}])
        .await
        .unwrap();
    run(
        &db,
        doc! {"createIndexes": "hashed_ci", "indexes": [{"key": {"h": "hashed"}, "name": "h_hashed"}]},
    )
    .await;
    let stages = explain_find(&db, "hashed_ci", doc! {"filter": {"h": "ANN"}}).await;
    assert!(stages.contains(&"IXSCAN".to_string()), "{stages:?}");
    let found = run(&db, doc! {"find": "hashed_ci", "filter": {"h": "ANN"}}).await;
    assert_eq!(first_batch(&found), vec![doc! {"_id": 1, "h": "Ann"}]);

    // Text indexes take no collation, explicit or inherited.
    assert!(db
        .run_command(
            doc! {"createIndexes": "french", "indexes": [{"key": {"t": "text"}, "name": "t_text"}]}
        )
        .await
        .is_err());
    run(
        &db,
        doc! {"createIndexes": "french", "indexes": [
            {"key": {"t": "text"}, "name": "t_text", "collation": {"locale": "simple"}}
        ]},
    )
    .await;
}

#[tokio::test]
async fn reads_compare_strings_under_the_collation_they_run_with() {
    let server = TestServer::start().await;
    let db = server.client().database("collation_reads");
    let coll = db.collection::<Document>("c");
    coll.insert_many([
        doc! {"_id": 1, "str": "foo"},
        doc! {"_id": 2, "str": "bar"},
        doc! {"_id": 3, "str": "FOO"},
    ])
    .await
    .unwrap();
    let strength2 = Collation::builder()
        .locale("en_US")
        .strength(mongodb::options::CollationStrength::Secondary)
        .build();
    // jstests/core/collation.js (count, find, aggregate, distinct).
    assert_eq!(coll.count_documents(doc! {"str": "FOO"}).await.unwrap(), 1);
    assert_eq!(
        coll.count_documents(doc! {"str": "FOO"})
            .collation(Collation::builder().locale("en_US").build())
            .await
            .unwrap(),
        1
    );
    assert_eq!(
        coll.count_documents(doc! {"str": "FOO"})
            .collation(strength2.clone())
            .await
            .unwrap(),
        2
    );
    let reply = run(
        &db,
        doc! {"count": "c", "query": {"str": "fOo"}, "collation": case_insensitive()},
    )
    .await;
    assert_eq!(reply.get_i32("n").unwrap(), 2);
    let found = run(
        &db,
        doc! {"find": "c", "filter": {"str": {"$gt": "Bar"}}, "sort": {"_id": 1}, "collation": case_insensitive()},
    )
    .await;
    let ids: Vec<i32> = first_batch(&found)
        .iter()
        .map(|d| d.get_i32("_id").unwrap())
        .collect();
    assert_eq!(ids, vec![1, 3]);
    let found = run(
        &db,
        doc! {"find": "c", "filter": {"str": {"$in": ["BAR"]}}, "collation": case_insensitive()},
    )
    .await;
    assert_eq!(first_batch(&found), vec![doc! {"_id": 2, "str": "bar"}]);
    let distinct = run(
        &db,
        doc! {"distinct": "c", "key": "str", "collation": case_insensitive()},
    )
    .await;
    assert_eq!(distinct.get_array("values").unwrap().len(), 2);
    let distinct = run(&db, doc! {"distinct": "c", "key": "str"}).await;
    assert_eq!(distinct.get_array("values").unwrap().len(), 3);
    let aggregated = run(
        &db,
        doc! {"aggregate": "c", "pipeline": [
            {"$match": {"str": "FOO"}},
            {"$group": {"_id": "$str", "n": {"$sum": 1}}},
            {"$project": {"_id": 0, "n": 1, "same": {"$eq": ["$n", 2]}}},
        ], "cursor": {}, "collation": case_insensitive()},
    )
    .await;
    assert_eq!(first_batch(&aggregated), vec![doc! {"n": 2, "same": true}]);
    let compared = run(
        &db,
        doc! {"aggregate": "c", "pipeline": [
            {"$match": {"_id": 1}},
            {"$project": {"_id": 0, "eq": {"$eq": ["$str", "FOO"]}, "in": {"$in": ["FOO", ["$str"]]}}},
        ], "cursor": {}, "collation": case_insensitive()},
    )
    .await;
    assert_eq!(first_batch(&compared), vec![doc! {"eq": true, "in": true}]);
    // `$expr` in a find compares under the find's collation too.
    let found = run(
        &db,
        doc! {"find": "c", "filter": {"$expr": {"$eq": ["$str", "BAR"]}}, "collation": case_insensitive()},
    )
    .await;
    assert_eq!(first_batch(&found).len(), 1);
}

#[tokio::test]
async fn sort_orders_strings_by_locale_strength_case_and_numbers() {
    let server = TestServer::start().await;
    let db = server.client().database("collation_sort");
    let coll = db.collection::<Document>("c");
    coll.insert_many([
        doc! {"_id": 1, "s": "b"},
        doc! {"_id": 2, "s": "B"},
        doc! {"_id": 3, "s": "a"},
        doc! {"_id": 4, "s": "10"},
        doc! {"_id": 5, "s": "9"},
        doc! {"_id": 6, "s": "é"},
    ])
    .await
    .unwrap();
    let sorted = |reply: Document| -> Vec<i32> {
        first_batch(&reply)
            .iter()
            .map(|d| d.get_i32("_id").unwrap())
            .collect()
    };
    // Byte order: digits, upper case, lower case, then "é".
    let simple = run(&db, doc! {"find": "c", "sort": {"s": 1, "_id": 1}}).await;
    assert_eq!(sorted(simple), vec![4, 5, 2, 3, 1, 6]);
    // Locale order: digits as text, then letters with "a" < "b" < "B" < "é" ... lower case first.
    let english = run(
        &db,
        doc! {"find": "c", "sort": {"s": 1, "_id": 1}, "collation": {"locale": "en"}},
    )
    .await;
    assert_eq!(sorted(english), vec![4, 5, 3, 1, 2, 6]);
    let upper_first = run(
        &db,
        doc! {"find": "c", "sort": {"s": 1, "_id": 1}, "collation": {"locale": "en", "caseFirst": "upper"}},
    )
    .await;
    assert_eq!(sorted(upper_first), vec![4, 5, 3, 2, 1, 6]);
    // numericOrdering: "9" before "10".
    let numeric = run(
        &db,
        doc! {"find": "c", "sort": {"s": 1, "_id": 1}, "collation": {"locale": "en", "numericOrdering": true}},
    )
    .await;
    assert_eq!(sorted(numeric), vec![5, 4, 3, 1, 2, 6]);
    // The same order from an aggregation `$sort` (blocking and streaming).
    let aggregated = run(
        &db,
        doc! {"aggregate": "c", "pipeline": [{"$sort": {"s": -1, "_id": 1}}, {"$project": {"_id": 1}}],
              "cursor": {}, "collation": {"locale": "en", "numericOrdering": true}},
    )
    .await;
    assert_eq!(sorted(aggregated), vec![6, 2, 1, 3, 4, 5]);
}

#[tokio::test]
async fn indexes_serve_only_queries_of_their_collation_and_answer_the_same() {
    let server = TestServer::start().await;
    let db = server.client().database("collation_indexes");
    let coll = db.collection::<Document>("c");
    run(
        &db,
        doc! {"createIndexes": "c", "indexes": [{"key": {"a": 1}, "name": "a_1", "collation": {"locale": "fr_CA"}}]},
    )
    .await;
    coll.insert_many([
        doc! {"_id": 1, "a": "foo"},
        doc! {"_id": 2, "a": "FOO"},
        doc! {"_id": 3, "a": "côte"},
        doc! {"_id": 4, "a": "coté"},
        doc! {"_id": 5, "a": 7},
    ])
    .await
    .unwrap();
    // jstests/core/collation.js: simple or another locale ⇒ COLLSCAN; matching ⇒ IXSCAN.
    let stages = explain_find(&db, "c", doc! {"filter": {"a": "foo"}}).await;
    assert_eq!(stages, vec!["COLLSCAN"]);
    let stages = explain_find(
        &db,
        "c",
        doc! {"filter": {"a": "foo"}, "collation": {"locale": "en_US"}},
    )
    .await;
    assert_eq!(stages, vec!["COLLSCAN"]);
    let stages = explain_find(
        &db,
        "c",
        doc! {"filter": {"a": "foo"}, "collation": {"locale": "fr_CA"}},
    )
    .await;
    assert!(stages.contains(&"IXSCAN".to_string()), "{stages:?}");
    // Explain names the query's collation, and the index's on its IXSCAN.
    let explain = run(
        &db,
        doc! {"explain": {"find": "c", "filter": {"a": "foo"}, "collation": {"locale": "fr_CA"}}},
    )
    .await;
    let planner = explain.get_document("queryPlanner").unwrap();
    assert_eq!(
        planner.get_document("collation").unwrap().get_str("locale"),
        Ok("fr_CA")
    );
    let mut stage = planner.get_document("winningPlan").unwrap();
    while stage.get_str("stage") != Ok("IXSCAN") {
        stage = stage.get_document("inputStage").unwrap();
    }
    assert_eq!(
        stage
            .get_document("collation")
            .unwrap()
            .get_bool("backwards"),
        Ok(true)
    );

    // The index answers what a collection scan under the same collation answers.
    let under = |filter: Document, sort: Document, hint: Bson| {
        let db = db.clone();
        async move {
            let reply = run(
                &db,
                doc! {"find": "c", "filter": filter, "sort": sort, "hint": hint,
                "collation": {"locale": "fr_CA", "strength": 3}},
            )
            .await;
            first_batch(&reply)
                .iter()
                .map(|d| d.get_i32("_id").unwrap())
                .collect::<Vec<_>>()
        }
    };
    for filter in [
        doc! {"a": "foo"},
        doc! {"a": {"$gte": "c", "$lt": "d"}},
        doc! {"a": {"$in": ["FOO", "coté"]}},
        doc! {"a": {"$ne": "foo"}},
        doc! {"a": {"$regex": "^co"}},
        doc! {"a": {"$gt": 5}},
    ] {
        let by_index = under(filter.clone(), doc! {"a": 1}, Bson::String("a_1".into())).await;
        let scanned = under(
            filter.clone(),
            doc! {"a": 1},
            Bson::Document(doc! {"$natural": 1}),
        )
        .await;
        assert_eq!(by_index, scanned, "{filter:?}");
    }
    // fr_CA weighs the last accent first: côte < coté (French of France: the other way).
    assert_eq!(
        under(
            doc! {"a": {"$type": "string"}},
            doc! {"a": 1},
            Bson::String("a_1".into())
        )
        .await,
        vec![3, 4, 1, 2]
    );
    // A hinted index of another collation is still correct (read whole, re-checked).
    let reply = run(
        &db,
        doc! {"find": "c", "filter": {"a": "FOO"}, "hint": "a_1"},
    )
    .await;
    assert_eq!(first_batch(&reply), vec![doc! {"_id": 2, "a": "FOO"}]);
}

#[tokio::test]
async fn unique_indexes_and_writes_compare_under_the_collation() {
    let server = TestServer::start().await;
    let db = server.client().database("collation_writes");
    run(
        &db,
        doc! {"create": "users", "collation": case_insensitive()},
    )
    .await;
    let users = db.collection::<Document>("users");
    run(
        &db,
        doc! {"createIndexes": "users", "indexes": [{"key": {"email": 1}, "name": "email_1", "unique": true}]},
    )
    .await;
    users
        .insert_one(doc! {"_id": 1, "email": "Ann@Example.com", "tags": ["a"]})
        .await
        .unwrap();
    // The inherited strength-2 collation makes the unique index case-insensitive.
    let error = users
        .insert_one(doc! {"_id": 2, "email": "ann@example.COM"})
        .await
        .expect_err("a duplicate under the collation");
    assert!(
        matches!(&*error.kind, mongodb::error::ErrorKind::Write(
            mongodb::error::WriteFailure::WriteError(write)) if write.code == 11000),
        "{error:?}"
    );
    // Queries and writes inherit the default; an explicit simple collation overrides it.
    assert_eq!(
        users
            .count_documents(doc! {"email": "ANN@EXAMPLE.COM"})
            .await
            .unwrap(),
        1
    );
    assert_eq!(
        users
            .count_documents(doc! {"email": "ANN@EXAMPLE.COM"})
            .collation(Collation::builder().locale("simple").build())
            .await
            .unwrap(),
        0
    );
    let updated = users
        .update_one(
            doc! {"email": "ann@example.com"},
            doc! {"$addToSet": {"tags": "A"}, "$set": {"seen": true}},
        )
        .await
        .unwrap();
    assert_eq!(updated.matched_count, 1);
    let stored = users.find_one(doc! {"_id": 1}).await.unwrap().unwrap();
    // "A" equals "a" at strength 2: `$addToSet` adds nothing.
    assert_eq!(
        stored.get_array("tags").unwrap(),
        &vec![Bson::String("a".into())]
    );
    assert_eq!(stored.get_bool("seen"), Ok(true));
    let pulled = run(
        &db,
        doc! {"update": "users", "updates": [{"q": {"_id": 1}, "u": {"$pull": {"tags": "A"}}}]},
    )
    .await;
    assert_eq!(pulled.get_i32("nModified").unwrap(), 1);
    let modified = run(
        &db,
        doc! {"findAndModify": "users", "query": {"email": "ANN@example.com"},
        "update": {"$set": {"found": true}}, "new": true},
    )
    .await;
    assert_eq!(
        modified.get_document("value").unwrap().get_bool("found"),
        Ok(true)
    );
    let deleted = run(
        &db,
        doc! {"delete": "users", "deletes": [{"q": {"email": "ANN@EXAMPLE.COM"}, "limit": 1,
        "collation": {"locale": "simple"}}]},
    )
    .await;
    assert_eq!(deleted.get_i32("n").unwrap(), 0);
    let deleted = run(
        &db,
        doc! {"delete": "users", "deletes": [{"q": {"email": "ANN@EXAMPLE.COM"}, "limit": 1}]},
    )
    .await;
    assert_eq!(deleted.get_i32("n").unwrap(), 1);
}

#[tokio::test]
async fn group_keys_and_accumulators_compare_under_the_collation() {
    let server = TestServer::start().await;
    let db = server.client().database("collation_group");
    let coll = db.collection::<Document>("c");
    coll.insert_many([
        doc! {"_id": 1, "k": "a", "v": "x"},
        doc! {"_id": 2, "k": "A", "v": "X"},
        doc! {"_id": 3, "k": "b", "v": "y"},
    ])
    .await
    .unwrap();
    let reply = run(
        &db,
        doc! {"aggregate": "c", "pipeline": [
            {"$group": {"_id": "$k", "n": {"$sum": 1}, "set": {"$addToSet": "$v"}}},
            {"$project": {"n": 1, "size": {"$size": "$set"}}},
            {"$sort": {"n": -1}},
        ], "cursor": {}, "collation": case_insensitive()},
    )
    .await;
    let groups = first_batch(&reply);
    assert_eq!(groups.len(), 2);
    assert_eq!(groups[0].get_i32("n").unwrap(), 2);
    assert_eq!(groups[0].get_i32("size").unwrap(), 1);
}

#[tokio::test]
async fn unsupported_collation_requests_are_refused() {
    let server = TestServer::start().await;
    let db = server.client().database("collation_refused");
    // ICU4X has no data for search collations: refused, never silently the root order.
    let (code, _, _) = command_error(
        db.run_command(doc! {"find": "c", "collation": {"locale": "da@collation=search"}})
            .await,
    );
    assert_eq!(code, 2);
    // Backwards secondary weighting is fixed by the locale in ICU4X.
    let (code, _, _) = command_error(
        db.run_command(doc! {"find": "c", "collation": {"locale": "fr", "backwards": true}})
            .await,
    );
    assert_eq!(code, 238);
    let (code, _, _) = command_error(db.run_command(doc! {"find": "c", "collation": "en"}).await);
    assert_eq!(code, 14);
}
