//! `$text` through a text index, with the examples of MongoDB's manual ("Text Search on
//! Self-Managed Deployments", `$text` operator page): terms, phrases, negations, languages,
//! case and diacritic sensitivity, `{$meta: "textScore"}` in projections and sorts, and mongod's
//! errors.

mod common;

use bson::{doc, Document};
use common::TestServer;
use futures::TryStreamExt;
use mongodb::{Collection, Database};

async fn articles(server: &TestServer) -> (Database, Collection<Document>) {
    let db = server.client().database("text");
    let articles = db.collection::<Document>("articles");
    articles
        .insert_many(vec![
            doc! {"_id": 1, "subject": "coffee", "author": "xyz", "views": 50},
            doc! {"_id": 2, "subject": "Coffee Shopping", "author": "efg", "views": 5},
            doc! {"_id": 3, "subject": "Baking a cake", "author": "abc", "views": 90},
            doc! {"_id": 4, "subject": "baking", "author": "xyz", "views": 100},
            doc! {"_id": 5, "subject": "Café Con Leche", "author": "abc", "views": 200},
            doc! {"_id": 6, "subject": "Сырники", "author": "jkl", "views": 80},
            doc! {"_id": 7, "subject": "coffee and cream", "author": "efg", "views": 10},
            doc! {"_id": 8, "subject": "Cafe con Leche", "author": "xyz", "views": 10},
        ])
        .await
        .unwrap();
    db.run_command(doc! {"createIndexes": "articles", "indexes": [{"key": {"subject": "text"}, "name": "subject_text"}]})
        .await
        .unwrap();
    (db, articles)
}

async fn ids(articles: &Collection<Document>, filter: Document) -> Vec<i32> {
    let mut ids: Vec<i32> = articles
        .find(filter)
        .await
        .unwrap()
        .try_collect::<Vec<Document>>()
        .await
        .unwrap()
        .iter()
        .map(|document| document.get_i32("_id").unwrap())
        .collect();
    ids.sort_unstable();
    ids
}

#[tokio::test]
async fn text_queries_match_as_the_manual_shows() {
    let server = TestServer::start().await;
    let (_, articles) = articles(&server).await;
    let text = |search: &str| doc! {"$text": {"$search": search}};
    assert_eq!(ids(&articles, text("coffee")).await, [1, 2, 7]);
    assert_eq!(
        ids(&articles, text("bake coffee cake")).await,
        [1, 2, 3, 4, 7]
    );
    assert_eq!(ids(&articles, text("\"coffee shop\"")).await, [2]);
    assert_eq!(ids(&articles, text("coffee -shop")).await, [1, 7]);
    assert_eq!(
        ids(
            &articles,
            doc! {"$text": {"$search": "leche", "$language": "es"}}
        )
        .await,
        [5, 8]
    );
    assert_eq!(
        ids(
            &articles,
            doc! {"$text": {"$search": "Coffee", "$caseSensitive": true}}
        )
        .await,
        [2]
    );
    assert_eq!(
        ids(
            &articles,
            doc! {"$text": {"$search": "CAFÉ", "$diacriticSensitive": true}}
        )
        .await,
        [5]
    );
    // Other conditions apply too.
    assert_eq!(
        ids(
            &articles,
            doc! {"$text": {"$search": "coffee"}, "views": {"$gte": 10}}
        )
        .await,
        [1, 7]
    );
    // Only negations: nothing.
    assert!(ids(&articles, text("-coffee")).await.is_empty());
}

#[tokio::test]
async fn text_scores_in_projections_and_sorts() {
    let server = TestServer::start().await;
    let (_, articles) = articles(&server).await;
    // The manual: {_id: 3, subject: "Baking a cake", ..., score: 0.75}.
    let found: Vec<Document> = articles
        .find(doc! {"$text": {"$search": "cake"}})
        .projection(doc! {"score": {"$meta": "textScore"}})
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap();
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].get_i32("_id").unwrap(), 3);
    assert_eq!(found[0].get_f64("score").unwrap(), 0.75);
    // Highest score first: "coffee" alone scores more than "Coffee Shopping" and "coffee and
    // cream" (a term that is the whole string scores 1.1 times more).
    let sorted: Vec<Document> = articles
        .find(doc! {"$text": {"$search": "coffee"}})
        .projection(doc! {"score": {"$meta": "textScore"}, "_id": 1})
        .sort(doc! {"score": {"$meta": "textScore"}})
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap();
    let scores: Vec<f64> = sorted
        .iter()
        .map(|document| document.get_f64("score").unwrap())
        .collect();
    assert_eq!(sorted[0].get_i32("_id").unwrap(), 1);
    assert!(
        scores.windows(2).all(|pair| pair[0] >= pair[1]),
        "{scores:?}"
    );
    assert_eq!(scores.len(), 3);
}

#[tokio::test]
async fn text_queries_use_the_text_index_and_refuse_what_mongod_refuses() {
    let server = TestServer::start().await;
    let (db, articles) = articles(&server).await;
    let reply = db
        .run_command(doc! {"explain": {"find": "articles", "filter": {"$text": {"$search": "coffee cake"}}}, "verbosity": "executionStats"})
        .await
        .unwrap();
    let planner = reply.get_document("queryPlanner").unwrap();
    let scan = planner
        .get_document("winningPlan")
        .unwrap()
        .get_document("inputStage")
        .unwrap();
    assert_eq!(scan.get_str("indexName").unwrap(), "subject_text");
    let stats = reply.get_document("executionStats").unwrap();
    assert_eq!(stats.get_i32("nReturned").unwrap(), 4);
    // One key per term per document: coffee (1, 2, 7) and cake (3).
    assert_eq!(stats.get_i32("totalKeysExamined").unwrap(), 4);

    let code = |error: mongodb::error::Error| match *error.kind {
        mongodb::error::ErrorKind::Command(command) => (command.code, command.message),
        other => panic!("expected a command error, got {other:?}"),
    };
    // No text index.
    let error = db
        .run_command(doc! {"find": "other", "filter": {"$text": {"$search": "x"}}})
        .await
        .unwrap_err();
    assert_eq!(
        code(error),
        (27, "text index required for $text query".to_string())
    );
    // A score without $text.
    let error = db
        .run_command(doc! {"find": "articles", "projection": {"s": {"$meta": "textScore"}}})
        .await
        .unwrap_err();
    assert_eq!(
        code(error),
        (
            40218,
            "query requires text score metadata, but it is not available".to_string()
        )
    );
    // $text only once, at the top level.
    let error = db
        .run_command(doc! {"find": "articles", "filter": {"$and": [{"$text": {"$search": "a"}}, {"$text": {"$search": "b"}}]}})
        .await
        .unwrap_err();
    assert_eq!(code(error).0, 2);
    let error = db
        .run_command(doc! {"find": "articles", "filter": {"$nor": [{"$text": {"$search": "a"}}]}})
        .await
        .unwrap_err();
    assert_eq!(code(error).0, 2);
    // Bad arguments.
    let error = db
        .run_command(doc! {"find": "articles", "filter": {"$text": {"$search": 5}}})
        .await
        .unwrap_err();
    assert_eq!(code(error).0, 14);
    // In aggregation, only in the first $match.
    let found: Vec<Document> = articles
        .aggregate(vec![
            doc! {"$match": {"$text": {"$search": "coffee"}}},
            doc! {"$count": "n"},
        ])
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap();
    assert_eq!(found, vec![doc! {"n": 3}]);
    let error = db
        .run_command(doc! {"aggregate": "articles", "pipeline": [{"$project": {"subject": 1}}, {"$match": {"$text": {"$search": "coffee"}}}], "cursor": {}})
        .await
        .unwrap_err();
    assert_eq!(code(error).0, 17313);
    // Writes find their documents through the text index too.
    let updated = articles
        .update_many(
            doc! {"$text": {"$search": "baking"}},
            doc! {"$set": {"baked": true}},
        )
        .await
        .unwrap();
    assert_eq!(updated.matched_count, 2);
    assert_eq!(
        articles
            .count_documents(doc! {"$text": {"$search": "coffee"}})
            .await
            .unwrap(),
        3
    );
}
