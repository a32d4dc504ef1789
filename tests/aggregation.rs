//! Aggregation stages and accumulators through the official driver, on a real collection (the
//! server's buffers, which may spill, rather than the in-memory runner the unit tests use).
//! Expected values from the reference pages' examples.

mod common;

use bson::{doc, Bson, Document};
use common::{first_batch, TestServer};
use mongodb::Database;

async fn aggregate(db: &Database, pipeline: Vec<Document>) -> Vec<Document> {
    let reply = db
        .run_command(doc! {"aggregate": "c", "pipeline": pipeline, "cursor": {}})
        .await
        .expect("aggregate runs");
    first_batch(&reply)
}

#[tokio::test]
async fn facet_bucket_sample_and_n_accumulators_run_on_collections() {
    let server = TestServer::start().await;
    let db = server.client().database("aggregation");
    let scores: Vec<Document> = [
        ("PlayerA", "G1", 31),
        ("PlayerB", "G1", 33),
        ("PlayerC", "G1", 99),
        ("PlayerD", "G1", 1),
        ("PlayerA", "G2", 10),
        ("PlayerB", "G2", 14),
        ("PlayerC", "G2", 66),
        ("PlayerD", "G2", 80),
    ]
    .into_iter()
    .enumerate()
    .map(|(id, (player, game, score))| {
        doc! {"_id": id as i32, "playerId": player, "gameId": game, "score": score}
    })
    .collect();
    db.collection::<Document>("c")
        .insert_many(scores)
        .await
        .unwrap();
    // The `$maxN` reference page: the three best scores per game, best first.
    let best = aggregate(
        &db,
        vec![
            doc! {"$group": {"_id": "$gameId", "maxThreeScores": {"$maxN": {"input": ["$score", "$playerId"], "n": 3}}}},
            doc! {"$sort": {"_id": 1}},
        ],
    )
    .await;
    assert_eq!(
        best,
        vec![
            doc! {"_id": "G1", "maxThreeScores": [[99, "PlayerC"], [33, "PlayerB"], [31, "PlayerA"]]},
            doc! {"_id": "G2", "maxThreeScores": [[80, "PlayerD"], [66, "PlayerC"], [14, "PlayerB"]]},
        ]
    );
    let faceted = aggregate(
        &db,
        vec![doc! {"$facet": {
            "byScore": [{"$bucket": {"groupBy": "$score", "boundaries": [0, 50, 100]}}],
            "spread": [{"$group": {"_id": Bson::Null, "pop": {"$stdDevPop": "$score"}}}],
            "some": [{"$sample": {"size": 3}}, {"$count": "n"}],
        }}],
    )
    .await;
    assert_eq!(faceted.len(), 1);
    let facets = &faceted[0];
    assert_eq!(
        facets.get_array("byScore").unwrap(),
        &vec![
            Bson::Document(doc! {"_id": 0, "count": 5}),
            Bson::Document(doc! {"_id": 50, "count": 3}),
        ]
    );
    assert_eq!(
        facets.get_array("some").unwrap(),
        &vec![Bson::Document(doc! {"n": 3})]
    );
    let spread = facets.get_array("spread").unwrap()[0]
        .as_document()
        .unwrap()
        .get_f64("pop")
        .unwrap();
    // Population standard deviation of the eight scores (mean 41.75).
    let scores = [31.0f64, 33.0, 99.0, 1.0, 10.0, 14.0, 66.0, 80.0];
    let mean = scores.iter().sum::<f64>() / 8.0;
    let expected = (scores.iter().map(|s| (s - mean).powi(2)).sum::<f64>() / 8.0).sqrt();
    assert!((spread - expected).abs() < 1e-9, "{spread} vs {expected}");
    server.stop().await;
}

/// The `$lookup` reference page's equality examples (`orders`/`inventory`, and an array
/// `localField` with `classes`/`members`), with and without an index on the foreign field.
#[tokio::test]
async fn lookup_joins_by_equality_as_the_reference_page_shows() {
    let server = TestServer::start().await;
    let db = server.client().database("lookup");
    db.collection::<Document>("orders")
        .insert_many([
            doc! {"_id": 1, "item": "almonds", "price": 12, "quantity": 2},
            doc! {"_id": 2, "item": "pecans", "price": 20, "quantity": 1},
            doc! {"_id": 3},
        ])
        .await
        .unwrap();
    db.collection::<Document>("inventory")
        .insert_many([
            doc! {"_id": 1, "sku": "almonds", "description": "product 1", "instock": 120},
            doc! {"_id": 2, "sku": "bread", "description": "product 2", "instock": 80},
            doc! {"_id": 3, "sku": "cashews", "description": "product 3", "instock": 60},
            doc! {"_id": 4, "sku": "pecans", "description": "product 4", "instock": 70},
            doc! {"_id": 5, "sku": Bson::Null, "description": "Incomplete"},
            doc! {"_id": 6},
        ])
        .await
        .unwrap();
    let expected = vec![
        doc! {"_id": 1, "item": "almonds", "price": 12, "quantity": 2, "inventory_docs": [
            {"_id": 1, "sku": "almonds", "description": "product 1", "instock": 120}
        ]},
        doc! {"_id": 2, "item": "pecans", "price": 20, "quantity": 1, "inventory_docs": [
            {"_id": 4, "sku": "pecans", "description": "product 4", "instock": 70}
        ]},
        doc! {"_id": 3, "inventory_docs": [
            {"_id": 5, "sku": Bson::Null, "description": "Incomplete"},
            {"_id": 6}
        ]},
    ];
    let lookup = || {
        let db = db.clone();
        async move {
            first_batch(
                &db.run_command(doc! {"aggregate": "orders", "pipeline": [
                    {"$lookup": {"from": "inventory", "localField": "item",
                                 "foreignField": "sku", "as": "inventory_docs"}},
                ], "cursor": {}})
                    .await
                    .unwrap(),
            )
        }
    };
    assert_eq!(lookup().await, expected);
    db.run_command(
        doc! {"createIndexes": "inventory", "indexes": [{"key": {"sku": 1}, "name": "sku_1"}]},
    )
    .await
    .unwrap();
    let mut indexed = lookup().await;
    // Through the index, each order's matches come in key order; here one match each but for
    // the null order, whose two matches share the key null.
    indexed.iter_mut().for_each(|order| {
        if let Ok(matches) = order.get_array_mut("inventory_docs") {
            matches.sort_by_key(|m| m.as_document().unwrap().get_i32("_id").unwrap());
        }
    });
    assert_eq!(indexed, expected);

    db.collection::<Document>("classes")
        .insert_many([
            doc! {"_id": 1, "title": "Reading is ...", "enrollmentlist": ["giraffe2", "pandabear", "artie"]},
            doc! {"_id": 2, "title": "But Writing ...", "enrollmentlist": ["giraffe1", "artie"]},
        ])
        .await
        .unwrap();
    db.collection::<Document>("members")
        .insert_many([
            doc! {"_id": 1, "name": "artie", "status": "A"},
            doc! {"_id": 2, "name": "giraffe", "status": "D"},
            doc! {"_id": 3, "name": "giraffe1", "status": "A"},
            doc! {"_id": 4, "name": "panda", "status": "A"},
            doc! {"_id": 5, "name": "pandabear", "status": "A"},
            doc! {"_id": 6, "name": "giraffe2", "status": "D"},
        ])
        .await
        .unwrap();
    let classes = first_batch(
        &db.run_command(doc! {"aggregate": "classes", "pipeline": [
            {"$lookup": {"from": "members", "localField": "enrollmentlist",
                         "foreignField": "name", "as": "enrollee_info"}},
            {"$project": {"_id": 1, "ids": "$enrollee_info._id"}},
        ], "cursor": {}})
            .await
            .unwrap(),
    );
    assert_eq!(
        classes,
        vec![
            doc! {"_id": 1, "ids": [1, 5, 6]},
            doc! {"_id": 2, "ids": [1, 3]}
        ]
    );
    server.stop().await;
}

/// The `$lookup` reference page's correlated subquery (`let` + `pipeline`) over
/// `orders`/`warehouses`, and the concise form (`localField`/`foreignField` + `pipeline`).
#[tokio::test]
async fn lookup_runs_correlated_sub_pipelines() {
    let server = TestServer::start().await;
    let db = server.client().database("lookup_pipeline");
    db.collection::<Document>("orders")
        .insert_many([
            doc! {"_id": 1, "item": "almonds", "price": 12, "ordered": 2},
            doc! {"_id": 2, "item": "pecans", "price": 20, "ordered": 1},
            doc! {"_id": 3, "item": "cookies", "price": 10, "ordered": 60},
        ])
        .await
        .unwrap();
    db.collection::<Document>("warehouses")
        .insert_many([
            doc! {"_id": 1, "stock_item": "almonds", "warehouse": "A", "instock": 120},
            doc! {"_id": 2, "stock_item": "pecans", "warehouse": "A", "instock": 80},
            doc! {"_id": 3, "stock_item": "almonds", "warehouse": "B", "instock": 60},
            doc! {"_id": 4, "stock_item": "cookies", "warehouse": "B", "instock": 40},
            doc! {"_id": 5, "stock_item": "cookies", "warehouse": "A", "instock": 80},
        ])
        .await
        .unwrap();
    let joined = first_batch(
        &db.run_command(doc! {"aggregate": "orders", "pipeline": [
            {"$lookup": {
                "from": "warehouses",
                "let": {"order_item": "$item", "order_qty": "$ordered"},
                "pipeline": [
                    {"$match": {"$expr": {"$and": [
                        {"$eq": ["$stock_item", "$$order_item"]},
                        {"$gte": ["$instock", "$$order_qty"]},
                    ]}}},
                    {"$project": {"stock_item": 0, "_id": 0}},
                ],
                "as": "stockdata",
            }},
        ], "cursor": {}})
            .await
            .unwrap(),
    );
    assert_eq!(
        joined,
        vec![
            doc! {"_id": 1, "item": "almonds", "price": 12, "ordered": 2, "stockdata": [
                {"warehouse": "A", "instock": 120}, {"warehouse": "B", "instock": 60}
            ]},
            doc! {"_id": 2, "item": "pecans", "price": 20, "ordered": 1, "stockdata": [
                {"warehouse": "A", "instock": 80}
            ]},
            doc! {"_id": 3, "item": "cookies", "price": 10, "ordered": 60, "stockdata": [
                {"warehouse": "A", "instock": 80}
            ]},
        ]
    );
    // The concise form: equal documents first, then the pipeline over them.
    let concise = first_batch(
        &db.run_command(doc! {"aggregate": "orders", "pipeline": [
            {"$lookup": {
                "from": "warehouses", "localField": "item", "foreignField": "stock_item",
                "pipeline": [{"$match": {"warehouse": "A"}}, {"$project": {"_id": 1}}],
                "as": "inA",
            }},
            {"$project": {"inA": 1}},
        ], "cursor": {}})
            .await
            .unwrap(),
    );
    assert_eq!(
        concise,
        vec![
            doc! {"_id": 1, "inA": [{"_id": 1}]},
            doc! {"_id": 2, "inA": [{"_id": 2}]},
            doc! {"_id": 3, "inA": [{"_id": 5}]},
        ]
    );
    let (code, _, _) = common::command_error(
        db.run_command(doc! {"aggregate": "orders", "pipeline": [
            {"$lookup": {"from": "warehouses", "pipeline": [{"$out": "x"}], "as": "w"}},
        ], "cursor": {}})
            .await,
    );
    assert_eq!(code, 51047);
    server.stop().await;
}

/// `$unionWith` as on its reference page ("Report 1: All Sales by Items", over two of its
/// years): a collection name, and the object form with a sub-pipeline.
#[tokio::test]
async fn union_with_adds_another_collections_documents() {
    let server = TestServer::start().await;
    let db = server.client().database("union");
    let sales = |rows: &[(&str, &str, i32)]| -> Vec<Document> {
        rows.iter()
            .map(|(store, item, quantity)| doc! {"store": *store, "item": *item, "quantity": *quantity})
            .collect()
    };
    db.collection::<Document>("sales_2017")
        .insert_many(sales(&[
            ("General Store", "Chocolates", 150),
            ("ShopMart", "Chocolates", 50),
            ("General Store", "Cookies", 100),
            ("ShopMart", "Cookies", 120),
            ("General Store", "Pie", 10),
            ("ShopMart", "Pie", 5),
        ]))
        .await
        .unwrap();
    db.collection::<Document>("sales_2018")
        .insert_many(sales(&[
            ("General Store", "Cheese", 30),
            ("ShopMart", "Cheese", 50),
            ("General Store", "Chocolates", 125),
            ("ShopMart", "Chocolates", 150),
            ("General Store", "Cookies", 200),
            ("ShopMart", "Cookies", 100),
            ("ShopMart", "Nuts", 100),
            ("General Store", "Pie", 30),
            ("ShopMart", "Pie", 25),
        ]))
        .await
        .unwrap();
    let totals = first_batch(
        &db.run_command(doc! {"aggregate": "sales_2017", "pipeline": [
            {"$unionWith": "sales_2018"},
            {"$group": {"_id": "$item", "total": {"$sum": "$quantity"}}},
            {"$sort": {"total": -1}},
        ], "cursor": {}})
            .await
            .unwrap(),
    );
    assert_eq!(
        totals,
        vec![
            doc! {"_id": "Cookies", "total": 520},
            doc! {"_id": "Chocolates", "total": 475},
            doc! {"_id": "Nuts", "total": 100},
            doc! {"_id": "Cheese", "total": 80},
            doc! {"_id": "Pie", "total": 70},
        ]
    );
    let tagged = first_batch(
        &db.run_command(doc! {"aggregate": "sales_2017", "pipeline": [
            {"$set": {"_id": "2017"}},
            {"$unionWith": {"coll": "sales_2018", "pipeline": [
                {"$match": {"item": "Nuts"}},
                {"$set": {"_id": "2018"}},
            ]}},
            {"$group": {"_id": "$_id", "n": {"$sum": 1}}},
            {"$sort": {"_id": 1}},
        ], "cursor": {}})
            .await
            .unwrap(),
    );
    assert_eq!(
        tagged,
        vec![doc! {"_id": "2017", "n": 6}, doc! {"_id": "2018", "n": 1}]
    );
    let (code, _, _) = common::command_error(
        db.run_command(doc! {"aggregate": "sales_2017", "pipeline": [{"$unionWith": {"coll": "x", "y": 1}}], "cursor": {}})
            .await,
    );
    assert_eq!(code, 40415);
    server.stop().await;
}

/// `$out` as on its reference page (`books` grouped into `authors`): the target is replaced
/// whole, keeps its indexes, and is left untouched when the output cannot be written.
#[tokio::test]
async fn out_replaces_the_target_whole_or_not_at_all() {
    let server = TestServer::start().await;
    let db = server.client().database("out");
    db.collection::<Document>("books")
        .insert_many([
            doc! {"_id": 8751, "title": "The Banquet", "author": "Dante", "copies": 2},
            doc! {"_id": 8752, "title": "Divine Comedy", "author": "Dante", "copies": 1},
            doc! {"_id": 8645, "title": "Eclogues", "author": "Dante", "copies": 2},
            doc! {"_id": 7000, "title": "The Odyssey", "author": "Homer", "copies": 10},
            doc! {"_id": 7020, "title": "Iliad", "author": "Homer", "copies": 10},
        ])
        .await
        .unwrap();
    let authors = db.collection::<Document>("authors");
    authors.insert_one(doc! {"_id": "stale"}).await.unwrap();
    db.run_command(
        doc! {"createIndexes": "authors", "indexes": [{"key": {"books": 1}, "name": "books_1"}]},
    )
    .await
    .unwrap();
    let reply = db
        .run_command(doc! {"aggregate": "books", "pipeline": [
            {"$group": {"_id": "$author", "books": {"$push": "$title"}}},
            {"$out": "authors"},
        ], "cursor": {}})
        .await
        .unwrap();
    assert!(first_batch(&reply).is_empty());
    let mut written = common::find_all(&authors, doc! {}, doc! {}).await;
    for author in &mut written {
        let books = author.get_array_mut("books").unwrap();
        books.sort_by_key(|title| title.as_str().unwrap().to_string());
    }
    assert_eq!(
        written,
        vec![
            doc! {"_id": "Dante", "books": ["Divine Comedy", "Eclogues", "The Banquet"]},
            doc! {"_id": "Homer", "books": ["Iliad", "The Odyssey"]},
        ]
    );
    let indexes = first_batch(
        &db.run_command(doc! {"listIndexes": "authors"})
            .await
            .unwrap(),
    );
    assert!(indexes
        .iter()
        .any(|index| index.get_str("name") == Ok("books_1")));

    // A unique index the output violates fails the stage; the target keeps its documents.
    db.run_command(doc! {"createIndexes": "authors", "indexes": [{"key": {"n": 1}, "name": "n_1", "unique": true, "sparse": true}]})
        .await
        .unwrap();
    let (code, _, _) = common::command_error(
        db.run_command(doc! {"aggregate": "books", "pipeline": [
            {"$project": {"n": {"$literal": 1}}},
            {"$out": "authors"},
        ], "cursor": {}})
            .await,
    );
    assert_eq!(code, 11000);
    assert_eq!(authors.count_documents(doc! {}).await.unwrap(), 2);
    let names = db.list_collection_names().await.unwrap();
    assert!(
        !names.iter().any(|name| name.starts_with("tmp.agg_out")),
        "{names:?}"
    );
    // `$out` ends a pipeline.
    let (code, _, _) = common::command_error(
        db.run_command(
            doc! {"aggregate": "books", "pipeline": [{"$out": "x"}, {"$match": {}}], "cursor": {}},
        )
        .await,
    );
    assert_eq!(code, 40601);
    server.stop().await;
}

/// The target's documents, sorted by `_id`.
async fn contents(db: &Database, name: &str) -> Vec<Document> {
    let reply = db
        .run_command(doc! {"find": name, "filter": {}, "sort": {"_id": 1}})
        .await
        .expect("find runs");
    first_batch(&reply)
}

async fn reset(db: &Database, name: &str, documents: Vec<Document>) {
    let collection = db.collection::<Document>(name);
    collection.drop().await.unwrap();
    if !documents.is_empty() {
        collection.insert_many(documents).await.unwrap();
    }
}

async fn merge_error(db: &Database, merge: Document) -> i32 {
    let error = db
        .run_command(doc! {"aggregate": "source", "pipeline": [{"$merge": merge}], "cursor": {}})
        .await
        .expect_err("the merge fails");
    match *error.kind {
        mongodb::error::ErrorKind::Command(ref command) => command.code,
        ref other => panic!("not a command error: {other:?}"),
    }
}

/// mongod's jstests/aggregation/sources/merge/all_modes.js: every supported combination of
/// `whenMatched` and `whenNotMatched` over the same source and target, including the unordered
/// failures (the other documents are still written) and the refused combinations (51181, the
/// target untouched).
#[tokio::test]
async fn merge_modes_behave_as_mongod_jstests_expect() {
    let server = TestServer::start().await;
    let db = server.client().database("merge");
    reset(
        &db,
        "source",
        vec![
            doc! {"_id": 1, "a": 1, "b": "a"},
            doc! {"_id": 2, "a": 2, "b": "b"},
            doc! {"_id": 3, "a": 3, "b": "c"},
        ],
    )
    .await;
    let run = |merge: Document| {
        let db = db.clone();
        async move {
            let reply = db
                .run_command(
                    doc! {"aggregate": "source", "pipeline": [{"$merge": merge}], "cursor": {}},
                )
                .await
                .expect("the merge runs");
            assert_eq!(first_batch(&reply), Vec::<Document>::new());
        }
    };
    let target = || {
        vec![
            doc! {"_id": 1, "a": 10},
            doc! {"_id": 3, "a": 30},
            doc! {"_id": 4, "a": 40},
        ]
    };

    reset(&db, "target", target()).await;
    run(doc! {"into": "target", "whenMatched": "replace", "whenNotMatched": "insert"}).await;
    assert_eq!(
        contents(&db, "target").await,
        vec![
            doc! {"_id": 1, "a": 1, "b": "a"},
            doc! {"_id": 2, "a": 2, "b": "b"},
            doc! {"_id": 3, "a": 3, "b": "c"},
            doc! {"_id": 4, "a": 40},
        ]
    );

    reset(&db, "target", target()).await;
    let code = merge_error(
        &db,
        doc! {"into": "target", "whenMatched": "replace", "whenNotMatched": "fail"},
    )
    .await;
    assert_eq!(code, 13113);
    assert_eq!(
        contents(&db, "target").await,
        vec![
            doc! {"_id": 1, "a": 1, "b": "a"},
            doc! {"_id": 3, "a": 3, "b": "c"},
            doc! {"_id": 4, "a": 40},
        ]
    );

    reset(
        &db,
        "target",
        vec![
            doc! {"_id": 3, "a": 30, "c": "y"},
            doc! {"_id": 4, "a": 40, "c": "z"},
            doc! {"_id": 10, "a": 10, "c": "x"},
        ],
    )
    .await;
    let code = merge_error(
        &db,
        doc! {"into": "target", "whenMatched": "fail", "whenNotMatched": "insert"},
    )
    .await;
    assert_eq!(code, 11000);
    assert_eq!(
        contents(&db, "target").await,
        vec![
            doc! {"_id": 1, "a": 1, "b": "a"},
            doc! {"_id": 2, "a": 2, "b": "b"},
            doc! {"_id": 3, "a": 30, "c": "y"},
            doc! {"_id": 4, "a": 40, "c": "z"},
            doc! {"_id": 10, "a": 10, "c": "x"},
        ]
    );

    for (matched, not_matched) in [("fail", "fail"), ("keepExisting", "fail")] {
        reset(&db, "target", vec![doc! {"_id": 1, "a": 10}]).await;
        let code = merge_error(
            &db,
            doc! {"into": "target", "whenMatched": matched, "whenNotMatched": not_matched},
        )
        .await;
        assert_eq!(code, 51181);
        assert_eq!(
            contents(&db, "target").await,
            vec![doc! {"_id": 1, "a": 10}]
        );
    }

    reset(
        &db,
        "target",
        vec![
            doc! {"_id": 1, "a": 10, "c": "z"},
            doc! {"_id": 3, "a": 30},
            doc! {"_id": 4, "a": 40},
        ],
    )
    .await;
    run(doc! {"into": "target", "whenMatched": "merge", "whenNotMatched": "insert"}).await;
    assert_eq!(
        contents(&db, "target").await,
        vec![
            doc! {"_id": 1, "a": 1, "c": "z", "b": "a"},
            doc! {"_id": 2, "a": 2, "b": "b"},
            doc! {"_id": 3, "a": 3, "b": "c"},
            doc! {"_id": 4, "a": 40},
        ]
    );

    reset(
        &db,
        "target",
        vec![
            doc! {"_id": 1, "a": 10, "c": "x"},
            doc! {"_id": 3, "a": 30, "c": "y"},
            doc! {"_id": 4, "a": 40, "c": "z"},
        ],
    )
    .await;
    let code = merge_error(
        &db,
        doc! {"into": "target", "whenMatched": "merge", "whenNotMatched": "fail"},
    )
    .await;
    assert_eq!(code, 13113);
    assert_eq!(
        contents(&db, "target").await,
        vec![
            doc! {"_id": 1, "a": 1, "b": "a", "c": "x"},
            doc! {"_id": 3, "a": 3, "b": "c", "c": "y"},
            doc! {"_id": 4, "a": 40, "c": "z"},
        ]
    );

    // A pipeline: matched documents go through it; unmatched ones are inserted as they are
    // (mongod's `upsertSupplied`).
    reset(&db, "target", vec![doc! {"_id": 1, "b": 1}]).await;
    run(doc! {"into": "target", "whenMatched": [{"$addFields": {"x": 2}}], "whenNotMatched": "insert"})
        .await;
    assert_eq!(
        contents(&db, "target").await,
        vec![
            doc! {"_id": 1, "b": 1, "x": 2},
            doc! {"_id": 2, "a": 2, "b": "b"},
            doc! {"_id": 3, "a": 3, "b": "c"},
        ]
    );
    // `$$new` is the output document; `let` adds variables evaluated against it.
    reset(
        &db,
        "target",
        vec![doc! {"_id": 1, "b": 1}, doc! {"_id": 3, "b": 3}],
    )
    .await;
    run(doc! {
        "into": "target",
        "let": {"doubled": {"$multiply": ["$a", 2]}},
        "whenMatched": [{"$set": {"from": "$$new.b", "doubled": "$$doubled"}}],
        "whenNotMatched": "discard",
    })
    .await;
    assert_eq!(
        contents(&db, "target").await,
        vec![
            doc! {"_id": 1, "b": 1, "from": "a", "doubled": 2},
            doc! {"_id": 3, "b": 3, "from": "c", "doubled": 6},
        ]
    );

    reset(&db, "target", target()).await;
    run(doc! {"into": "target", "whenMatched": "keepExisting", "whenNotMatched": "insert"}).await;
    assert_eq!(
        contents(&db, "target").await,
        vec![
            doc! {"_id": 1, "a": 10},
            doc! {"_id": 2, "a": 2, "b": "b"},
            doc! {"_id": 3, "a": 30},
            doc! {"_id": 4, "a": 40},
        ]
    );
}

/// mongod's mode_merge_insert.js and on_fields_validation.js: `on` fields other than `_id`
/// need a unique index of the target on exactly them (51183), documents without `_id` merge
/// on those fields and keep the target's `_id`, and a `$merge` creates its target.
#[tokio::test]
async fn merge_on_fields_need_a_unique_index() {
    let server = TestServer::start().await;
    let db = server.client().database("merge_on");
    reset(
        &db,
        "source",
        vec![
            doc! {"_id": 1, "a": 1, "b": "a"},
            doc! {"_id": 2, "a": 2, "b": "b"},
            doc! {"_id": 3, "a": 30, "b": "c"},
        ],
    )
    .await;
    // Into a collection that does not exist: created; the default `on` needs no index.
    db.run_command(doc! {"aggregate": "source", "pipeline": [{"$merge": "fresh"}], "cursor": {}})
        .await
        .unwrap();
    assert_eq!(contents(&db, "fresh").await.len(), 3);
    assert_eq!(
        merge_error(&db, doc! {"into": "missing", "on": "a"}).await,
        51183
    );
    reset(
        &db,
        "target",
        vec![
            doc! {"_id": 1, "a": 1, "c": "x"},
            doc! {"_id": 4, "a": 30, "c": "y"},
            doc! {"_id": 5, "a": 40, "c": "z"},
        ],
    )
    .await;
    assert_eq!(
        merge_error(&db, doc! {"into": "target", "on": "nonexistent"}).await,
        51183
    );
    assert_eq!(
        merge_error(
            &db,
            doc! {"into": "target", "on": ["nonexistent1", "nonexistent2"]}
        )
        .await,
        51183
    );
    db.run_command(doc! {"createIndexes": "target", "indexes": [{"key": {"a": 1}, "name": "a_1"}]})
        .await
        .unwrap();
    // Not unique: still no index to verify uniqueness.
    assert_eq!(
        merge_error(&db, doc! {"into": "target", "on": "a"}).await,
        51183
    );
    db.run_command(doc! {"dropIndexes": "target", "index": "a_1"})
        .await
        .unwrap();
    db.run_command(doc! {"createIndexes": "target", "indexes": [{"key": {"a": 1}, "name": "a_1", "unique": true}]})
        .await
        .unwrap();
    db.run_command(doc! {
        "aggregate": "source",
        "pipeline": [{"$project": {"_id": 0}}, {"$merge": {"into": "target", "on": "a"}}],
        "cursor": {},
    })
    .await
    .unwrap();
    let merged = contents(&db, "target").await;
    let without_generated_ids: Vec<Document> = merged
        .iter()
        .map(|document| {
            let mut document = document.clone();
            if matches!(document.get("_id"), Some(Bson::ObjectId(_))) {
                document.remove("_id");
            }
            document
        })
        .collect();
    // The inserted document gets a new `_id`; the merged ones keep theirs.
    assert_eq!(
        without_generated_ids,
        vec![
            doc! {"_id": 1, "a": 1, "c": "x", "b": "a"},
            doc! {"_id": 4, "a": 30, "c": "y", "b": "c"},
            doc! {"_id": 5, "a": 40, "c": "z"},
            doc! {"a": 2, "b": "b"},
        ]
    );
    // An output document whose `on` value is missing, null or an array.
    reset(&db, "source", vec![doc! {"_id": 1}]).await;
    assert_eq!(
        merge_error(&db, doc! {"into": "target", "on": "a"}).await,
        51132
    );
    reset(&db, "source", vec![doc! {"_id": 1, "a": [1, 2]}]).await;
    assert_eq!(
        merge_error(&db, doc! {"into": "target", "on": "a"}).await,
        51185
    );
    // A unique index the merge would violate: DuplicateKey, the target keeps its documents.
    reset(&db, "source", vec![doc! {"_id": 1, "a": 40}]).await;
    assert_eq!(merge_error(&db, doc! {"into": "target"}).await, 11000);
    assert_eq!(contents(&db, "target").await, merged);
    // `$merge` ends a pipeline.
    let error = db
        .run_command(doc! {
            "aggregate": "source",
            "pipeline": [{"$merge": "target"}, {"$match": {}}],
            "cursor": {},
        })
        .await
        .expect_err("$merge must be last");
    assert!(error.to_string().contains("40601"), "{error}");
}

/// `$graphLookup`, `$bucketAuto` and `$redact` as their reference pages show them, on
/// collections read through the planner.
#[tokio::test]
async fn graph_lookup_bucket_auto_and_redact_run_on_collections() {
    let server = TestServer::start().await;
    let db = server.client().database("stages");
    db.collection::<Document>("employees")
        .insert_many(vec![
            doc! {"_id": 1, "name": "Dev"},
            doc! {"_id": 2, "name": "Eliot", "reportsTo": "Dev"},
            doc! {"_id": 3, "name": "Ron", "reportsTo": "Eliot"},
            doc! {"_id": 4, "name": "Andrew", "reportsTo": "Eliot"},
            doc! {"_id": 5, "name": "Asya", "reportsTo": "Ron"},
            doc! {"_id": 6, "name": "Dan", "reportsTo": "Andrew"},
        ])
        .await
        .unwrap();
    db.run_command(
        doc! {"createIndexes": "employees", "indexes": [{"key": {"name": 1}, "name": "name_1"}]},
    )
    .await
    .unwrap();
    let hierarchy = first_batch(
        &db.run_command(doc! {"aggregate": "employees", "pipeline": [
            {"$match": {"name": "Dan"}},
            {"$graphLookup": {"from": "employees", "startWith": "$reportsTo",
                              "connectFromField": "reportsTo", "connectToField": "name",
                              "as": "reportingHierarchy", "depthField": "depth"}},
            {"$unwind": "$reportingHierarchy"},
            {"$sort": {"reportingHierarchy.depth": 1}},
            {"$project": {"_id": 0, "name": "$reportingHierarchy.name",
                          "depth": "$reportingHierarchy.depth"}},
        ], "cursor": {}})
            .await
            .unwrap(),
    );
    assert_eq!(
        hierarchy,
        vec![
            doc! {"name": "Andrew", "depth": 0_i64},
            doc! {"name": "Eliot", "depth": 1_i64},
            doc! {"name": "Dev", "depth": 2_i64},
        ]
    );
    let buckets = first_batch(
        &db.run_command(doc! {"aggregate": "employees", "pipeline": [
            {"$bucketAuto": {"groupBy": "$_id", "buckets": 2,
                             "output": {"names": {"$push": "$name"}}}},
        ], "cursor": {}})
            .await
            .unwrap(),
    );
    assert_eq!(
        buckets,
        vec![
            doc! {"_id": {"min": 1, "max": 4}, "names": ["Dev", "Eliot", "Ron"]},
            doc! {"_id": {"min": 4, "max": 6}, "names": ["Andrew", "Asya", "Dan"]},
        ]
    );
    let redacted = first_batch(
        &db.run_command(doc! {"aggregate": "employees", "pipeline": [
            {"$redact": {"$cond": [{"$eq": ["$name", "Dev"]}, "$$KEEP", "$$PRUNE"]}},
        ], "cursor": {}})
            .await
            .unwrap(),
    );
    assert_eq!(redacted, vec![doc! {"_id": 1, "name": "Dev"}]);
    // The pagination pattern: one page joined with $lookup/$graphLookup, and the total.
    let page = first_batch(
        &db.run_command(doc! {"aggregate": "employees", "pipeline": [
            {"$facet": {
                "data": [
                    {"$sort": {"_id": -1}},
                    {"$limit": 2},
                    {"$lookup": {"from": "employees", "localField": "reportsTo",
                                 "foreignField": "name", "as": "manager"}},
                    {"$graphLookup": {"from": "employees", "startWith": "$reportsTo",
                                      "connectFromField": "reportsTo", "connectToField": "name",
                                      "as": "chain"}},
                    {"$project": {"_id": 1, "manager": "$manager.name",
                                  "chain": {"$size": "$chain"}}},
                ],
                "total": [{"$count": "n"}],
            }},
        ], "cursor": {}})
            .await
            .unwrap(),
    );
    assert_eq!(
        page,
        vec![doc! {
            "data": [
                {"_id": 6, "manager": ["Andrew"], "chain": 3},
                {"_id": 5, "manager": ["Ron"], "chain": 3},
            ],
            "total": [{"n": 6}],
        }]
    );
    // A $unionWith pipeline may join too.
    let unioned = first_batch(
        &db.run_command(doc! {"aggregate": "employees", "pipeline": [
            {"$match": {"_id": 0}},
            {"$unionWith": {"coll": "employees", "pipeline": [
                {"$match": {"_id": 1}},
                {"$lookup": {"from": "employees", "localField": "name",
                             "foreignField": "reportsTo", "as": "reports"}},
                {"$project": {"_id": 0, "reports": "$reports.name"}},
            ]}},
        ], "cursor": {}})
            .await
            .unwrap(),
    );
    assert_eq!(unioned, vec![doc! {"reports": ["Eliot"]}]);
    // A $lookup inside a $lookup's sub-pipeline: two levels of reports.
    let tree = first_batch(
        &db.run_command(doc! {"aggregate": "employees", "pipeline": [
            {"$match": {"name": "Dev"}},
            {"$lookup": {"from": "employees", "let": {"boss": "$name"}, "as": "reports",
                "pipeline": [
                    {"$match": {"$expr": {"$eq": ["$reportsTo", "$$boss"]}}},
                    {"$lookup": {"from": "employees", "localField": "name",
                                 "foreignField": "reportsTo", "as": "reports"}},
                    {"$project": {"_id": 0, "name": 1, "reports": "$reports.name"}},
                ]}},
            {"$project": {"_id": 0, "reports": 1}},
        ], "cursor": {}})
            .await
            .unwrap(),
    );
    assert_eq!(
        tree,
        vec![doc! {"reports": [{"name": "Eliot", "reports": ["Ron", "Andrew"]}]}]
    );
    server.stop().await;
}

#[tokio::test]
async fn set_window_fields_computes_windows_per_partition() {
    let server = TestServer::start().await;
    let db = server.client().database("aggregation");
    let date = |text: &str| Bson::DateTime(bson::DateTime::parse_rfc3339_str(text).unwrap());
    // The `$setWindowFields` reference page's `cakeSales`.
    let sales = vec![
        doc! {"_id": 0, "orderDate": date("2020-05-18T14:10:30Z"), "state": "CA", "price": 13, "quantity": 120},
        doc! {"_id": 1, "orderDate": date("2021-03-20T11:30:05Z"), "state": "WA", "price": 14, "quantity": 140},
        doc! {"_id": 2, "orderDate": date("2021-01-11T06:31:15Z"), "state": "CA", "price": 12, "quantity": 145},
        doc! {"_id": 3, "orderDate": date("2020-02-08T13:13:23Z"), "state": "WA", "price": 13, "quantity": 104},
        doc! {"_id": 4, "orderDate": date("2019-05-18T16:09:01Z"), "state": "CA", "price": 41, "quantity": 162},
        doc! {"_id": 5, "orderDate": date("2019-01-08T06:12:03Z"), "state": "WA", "price": 43, "quantity": 134},
    ];
    db.collection::<Document>("c")
        .insert_many(sales)
        .await
        .unwrap();
    let output = aggregate(
        &db,
        vec![
            doc! {"$setWindowFields": {
                "partitionBy": {"$year": "$orderDate"},
                "sortBy": {"orderDate": 1},
                "output": {
                    "cumulativeQuantityForYear": {"$sum": "$quantity", "window": {"documents": ["unbounded", "current"]}},
                    "rank": {"$rank": {}},
                },
            }},
            doc! {"$project": {"cumulativeQuantityForYear": 1, "rank": 1}},
        ],
    )
    .await;
    assert_eq!(
        output,
        vec![
            doc! {"_id": 5, "cumulativeQuantityForYear": 134, "rank": 1},
            doc! {"_id": 4, "cumulativeQuantityForYear": 296, "rank": 2},
            doc! {"_id": 3, "cumulativeQuantityForYear": 104, "rank": 1},
            doc! {"_id": 0, "cumulativeQuantityForYear": 224, "rank": 2},
            doc! {"_id": 2, "cumulativeQuantityForYear": 145, "rank": 1},
            doc! {"_id": 1, "cumulativeQuantityForYear": 285, "rank": 2},
        ]
    );
    // A bad window is the command's error, with mongod's code.
    let error = db
        .run_command(doc! {"aggregate": "c", "cursor": {}, "pipeline": [
            {"$setWindowFields": {"output": {"a": {"$sum": 1, "window": {"documents": [-1, 0]}}}}},
        ]})
        .await
        .expect_err("documents bounds need a sortBy");
    assert!(format!("{error:?}").contains("5339901"), "{error:?}");
}

/// `$densify` then `$fill`, the gap-filling pair the reference pages combine, on a collection.
#[tokio::test]
async fn densify_then_fill_close_gaps_in_a_series() {
    let server = TestServer::start().await;
    let db = server.client().database("series");
    db.collection::<Document>("c")
        .insert_many(vec![
            doc! {"_id": 1, "hour": 0, "temp": 10.0},
            doc! {"_id": 2, "hour": 3, "temp": 16.0},
        ])
        .await
        .unwrap();
    let filled = aggregate(
        &db,
        vec![
            doc! {"$densify": {"field": "hour", "range": {"step": 1, "bounds": "full"}}},
            doc! {"$fill": {"sortBy": {"hour": 1}, "output": {"temp": {"method": "linear"}}}},
            doc! {"$project": {"_id": 0, "hour": 1, "temp": 1}},
        ],
    )
    .await;
    assert_eq!(
        filled,
        vec![
            doc! {"hour": 0, "temp": 10.0},
            doc! {"hour": 1, "temp": 12.0},
            doc! {"hour": 2, "temp": 14.0},
            doc! {"hour": 3, "temp": 16.0},
        ]
    );
    server.stop().await;
}

/// The profiler's `docsExamined` for the aggregate whose `comment` is `comment`.
async fn examined_by(db: &Database, comment: &str) -> i64 {
    let entry = db
        .collection::<Document>("system.profile")
        .find_one(doc! {"command.comment": comment})
        .await
        .unwrap()
        .unwrap_or_else(|| panic!("a profile entry for {comment}"));
    entry
        .get_i64("docsExamined")
        .or_else(|_| entry.get_i32("docsExamined").map(i64::from))
        .unwrap()
}

/// Every document of an aggregate cursor, fetched `batch_size` at a time, and how many batches
/// it took.
async fn drain(db: &Database, pipeline: Vec<Document>, batch_size: i32) -> (Vec<Document>, usize) {
    let reply = db
        .run_command(
            doc! {"aggregate": "c", "pipeline": pipeline, "cursor": {"batchSize": batch_size}},
        )
        .await
        .unwrap();
    let mut cursor = reply.get_document("cursor").unwrap().clone();
    let mut documents = first_batch(&reply);
    let mut batches = 1;
    while cursor.get_i64("id").unwrap() != 0 {
        let more = db
            .run_command(doc! {"getMore": cursor.get_i64("id").unwrap(), "collection": "c", "batchSize": batch_size})
            .await
            .unwrap();
        cursor = more.get_document("cursor").unwrap().clone();
        documents.extend(
            cursor
                .get_array("nextBatch")
                .unwrap()
                .iter()
                .map(|d| d.as_document().unwrap().clone()),
        );
        batches += 1;
    }
    (documents, batches)
}

#[tokio::test]
async fn streaming_pipelines_read_only_what_their_batches_need() {
    let server = TestServer::start().await;
    let db = server.client().database("streaming");
    let coll = db.collection::<Document>("c");
    let documents: Vec<Document> = (0..2000)
        .map(|n| doc! {"_id": n, "n": n, "a": [n, n + 1]})
        .collect();
    coll.insert_many(documents).await.unwrap();
    coll.create_index(mongodb::IndexModel::builder().keys(doc! {"n": -1}).build())
        .await
        .unwrap();
    db.run_command(doc! {"profile": 2}).await.unwrap();

    // No blocking stage: the first batch of 10 reads one storage page, not 2000 documents.
    db.run_command(doc! {
        "aggregate": "c",
        "pipeline": [{"$match": {"n": {"$gte": 0}}}, {"$project": {"n": 1}}],
        "cursor": {"batchSize": 10},
        "comment": "first batch",
    })
    .await
    .unwrap();
    // A `$limit` before a blocking stage stops the read once it has let its documents through.
    let limited = db
        .run_command(doc! {
            "aggregate": "c",
            "pipeline": [
                {"$match": {"n": {"$gte": 0}}},
                {"$limit": 5},
                {"$group": {"_id": null, "count": {"$sum": 1}}},
            ],
            "cursor": {},
            "comment": "limit then group",
        })
        .await
        .unwrap();
    assert_eq!(first_batch(&limited), vec![doc! {"_id": null, "count": 5}]);
    db.run_command(doc! {"profile": 0}).await.unwrap();
    assert!(examined_by(&db, "first batch").await < 500);
    assert!(examined_by(&db, "limit then group").await < 500);

    // Batch by batch, the output is what the pipeline makes of the whole collection: `$unwind`
    // copies across batch boundaries, `$skip` and `$limit` counted over the whole run.
    let (unwound, batches) = drain(
        &db,
        vec![
            doc! {"$match": {"_id": {"$lt": 10}}},
            doc! {"$unwind": "$a"},
            doc! {"$skip": 3},
            doc! {"$limit": 7},
            doc! {"$project": {"_id": 0, "a": 1}},
        ],
        2,
    )
    .await;
    let values: Vec<i32> = unwound.iter().map(|d| d.get_i32("a").unwrap()).collect();
    // Documents 0..10 unwind to 0,1, 1,2, 2,3, 3,4, 4,5 ...; skip 3, keep 7.
    assert_eq!(values, vec![2, 2, 3, 3, 4, 4, 5]);
    assert_eq!(batches, 4, "batches of 2, 2, 2 and 1");

    // A leading `$sort` the index provides streams too, in the index's order.
    let (sorted, _) = drain(
        &db,
        vec![
            doc! {"$sort": {"n": -1}},
            doc! {"$limit": 5},
            doc! {"$project": {"_id": 1}},
        ],
        2,
    )
    .await;
    let ids: Vec<i32> = sorted.iter().map(|d| d.get_i32("_id").unwrap()).collect();
    assert_eq!(ids, vec![1999, 1998, 1997, 1996, 1995]);
}

#[tokio::test]
async fn lookups_join_large_inputs_batch_by_batch_in_order() {
    let server = TestServer::start().await;
    let db = server.client().database("joins");
    let orders: Vec<Document> = (0..2500).map(|n| doc! {"_id": n, "item": n % 7}).collect();
    db.collection::<Document>("c")
        .insert_many(orders)
        .await
        .unwrap();
    let items: Vec<Document> = (0..7)
        .map(|k| doc! {"_id": k, "name": format!("item {k}")})
        .collect();
    db.collection::<Document>("items")
        .insert_many(items)
        .await
        .unwrap();
    let lookup = |as_field: &str| {
        doc! {"$lookup": {"from": "items", "localField": "item", "foreignField": "_id", "as": as_field}}
    };
    // Two joins in a row, each working through its input in batches, then a `$unionWith`: every
    // order once, in input order, each joined with its one item, then the items.
    let (output, _) = drain(
        &db,
        vec![
            doc! {"$match": {"_id": {"$gte": 0}}},
            lookup("it"),
            lookup("again"),
            doc! {"$project": {"name": {"$first": "$it.name"}, "joined": {"$size": "$again"}}},
            doc! {"$unionWith": "items"},
        ],
        500,
    )
    .await;
    assert_eq!(output.len(), 2507);
    for (n, document) in output.iter().take(2500).enumerate() {
        let n = n as i32;
        assert_eq!(
            document,
            &doc! {"_id": n, "name": format!("item {}", n % 7), "joined": 1},
        );
    }
    assert_eq!(output[2500], doc! {"_id": 0, "name": "item 0"});

    // A `$limit` after a join ends the read once it has let its documents through.
    db.run_command(doc! {"profile": 2}).await.unwrap();
    let limited = db
        .run_command(doc! {
            "aggregate": "c",
            "pipeline": [lookup("it"), {"$limit": 3}, {"$project": {"it": 1}}],
            "cursor": {},
            "comment": "lookup then limit",
        })
        .await
        .unwrap();
    db.run_command(doc! {"profile": 0}).await.unwrap();
    assert_eq!(
        first_batch(&limited),
        vec![
            doc! {"_id": 0, "it": [{"_id": 0, "name": "item 0"}]},
            doc! {"_id": 1, "it": [{"_id": 1, "name": "item 1"}]},
            doc! {"_id": 2, "it": [{"_id": 2, "name": "item 2"}]},
        ]
    );
    // The profiled read counts the orders read (one join batch and a page) and the item reads.
    assert!(examined_by(&db, "lookup then limit").await < 2000);

    // Seven items for up to seven keys per batch: each batch would read them all, so the run
    // reads them once and keeps them for its three batches: 2500 orders and 7 items examined.
    db.run_command(doc! {"profile": 2}).await.unwrap();
    db.run_command(doc! {
        "aggregate": "c",
        "pipeline": [lookup("it")],
        "cursor": {},
        "comment": "whole read kept",
    })
    .await
    .unwrap();
    db.run_command(doc! {"profile": 0}).await.unwrap();
    assert_eq!(examined_by(&db, "whole read kept").await, 2507);
}

#[tokio::test]
async fn union_with_feeds_large_collections_in_order() {
    let server = TestServer::start().await;
    let db = server.client().database("unions");
    db.collection::<Document>("c")
        .insert_many((0..3).map(|n| doc! {"_id": n, "from": "c"}))
        .await
        .unwrap();
    db.collection::<Document>("other")
        .insert_many((0..2500).map(|n| doc! {"_id": n, "x": n}))
        .await
        .unwrap();
    // Without a pipeline, with one (its leading `$match` filters the read), and a blocking
    // stage after the union: every document once, the union's after the input.
    let (plain, _) = drain(&db, vec![doc! {"$unionWith": "other"}], 700).await;
    assert_eq!(plain.len(), 2503);
    assert_eq!(plain[2], doc! {"_id": 2, "from": "c"});
    for (n, document) in plain[3..].iter().enumerate() {
        assert_eq!(document.get_i32("x").unwrap(), n as i32);
    }
    let (filtered, _) = drain(
        &db,
        vec![
            doc! {"$unionWith": {"coll": "other", "pipeline": [
                {"$match": {"x": {"$gte": 1000}}},
                {"$sort": {"x": -1}},
                {"$project": {"_id": 0, "x": 1}},
            ]}},
            doc! {"$group": {"_id": null, "n": {"$sum": 1}, "top": {"$first": "$x"}, "sum": {"$sum": "$x"}}},
        ],
        10,
    )
    .await;
    // 3 input documents (no x) and 1500 of the other's, the first of them 2499; the sum of
    // 1000..=2499 is 2,624,250.
    assert_eq!(
        filtered,
        vec![doc! {"_id": null, "n": 1503, "top": null, "sum": 2_624_250}]
    );
}
