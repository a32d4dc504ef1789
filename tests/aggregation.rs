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
