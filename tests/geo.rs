//! Geospatial queries through the official driver: `$geoWithin` and `$geoIntersects` answered
//! by a collection scan with the counts of mongod's jstests, mongod's refusals of bad regions
//! and of near queries it cannot run, and expiry on the geo paths (both TTL models) on the
//! manual clock.

mod common;

use bson::{doc, Bson, Document};
use common::{command_error, find_all, ClockedDb, TestServer};
use mongodb::Collection;

const T0: i64 = 1_700_000_000_000;

async fn count(collection: &Collection<Document>, filter: Document) -> usize {
    find_all(collection, filter, doc! {}).await.len()
}

fn ids(documents: &[Document]) -> Vec<Bson> {
    let mut ids: Vec<Bson> = documents
        .iter()
        .map(|document| document.get("_id").cloned().unwrap_or(Bson::Null))
        .collect();
    ids.sort_by_key(|id| id.to_string());
    ids
}

#[tokio::test]
async fn legacy_shapes_hold_the_points_geo_polygon1_noindex_counts() {
    let server = TestServer::start().await;
    let collection = server
        .client()
        .database("geo")
        .collection::<Document>("grid");
    // jstests/geo_polygon1_noindex.js: a point at every [x, y] of 1..8 × 1..8.
    let grid: Vec<Document> = (1..9)
        .flat_map(|x| (1..9).map(move |y| doc! {"_id": x * 10 + y, "loc": [x, y]}))
        .collect();
    collection.insert_many(grid).await.unwrap();
    let within = |shape: Document| doc! {"loc": {"$within": shape}};
    assert_eq!(
        count(
            &collection,
            within(doc! {"$polygon": [[0, 0], [1, 1], [0, 2]]})
        )
        .await,
        1
    );
    assert_eq!(
        count(
            &collection,
            within(doc! {"$polygon": [[0, 0], [0, 10], [10, 10], [10, 0]]})
        )
        .await,
        64
    );
    assert_eq!(
        count(
            &collection,
            within(
                doc! {"$polygon": {"a": [-10, -10], "b": [-10, 10], "c": [10, 10], "d": [10, -10]}}
            )
        )
        .await,
        64
    );
    // $box corners are included: x in 1..2, y in 1..3.
    let boxed = find_all(
        &collection,
        doc! {"loc": {"$geoWithin": {"$box": [[0, 0], [2, 3]]}}},
        doc! {},
    )
    .await;
    assert_eq!(
        ids(&boxed),
        vec![
            Bson::Int32(11),
            Bson::Int32(12),
            Bson::Int32(13),
            Bson::Int32(21),
            Bson::Int32(22),
            Bson::Int32(23)
        ]
    );
    // $center includes its circle: [4, 4] and its four neighbours at distance 1.
    assert_eq!(
        count(
            &collection,
            doc! {"loc": {"$geoWithin": {"$center": [[4, 4], 1]}}}
        )
        .await,
        5
    );
    // The same predicate counted through the aggregation countDocuments uses.
    let counted = collection
        .count_documents(doc! {"loc": {"$geoWithin": {"$center": [[4, 4], 1]}}})
        .await
        .unwrap();
    assert_eq!(counted, 5);
}

#[tokio::test]
async fn geojson_regions_relate_as_geo_s2oddshapes_and_geo_big_polygon_count() {
    let server = TestServer::start().await;
    let db = server.client().database("geo");
    // jstests/geo_s2oddshapes.js.
    let odd = db.collection::<Document>("odd");
    odd.insert_many(vec![
        doc! {"_id": "origin", "geo": {"type": "Point", "coordinates": [0.0, 0.0]}},
        doc! {"_id": "horiz", "geo": {"type": "LineString", "coordinates": [[-2.0, 10.0], [2.0, 10.0]]}},
        doc! {"_id": "vert", "geo": {"type": "LineString", "coordinates": [[10.0, -2.0], [10.0, 2.0]]}},
    ])
    .await
    .unwrap();
    let tall = doc! {"type": "Polygon", "coordinates": [[[1.0, 89.0], [-1.0, 89.0], [-1.0, -89.0], [1.0, -89.0], [1.0, 89.0]]]};
    let within = find_all(
        &odd,
        doc! {"geo": {"$within": {"$geometry": tall.clone()}}},
        doc! {},
    )
    .await;
    assert_eq!(ids(&within), vec![Bson::from("origin")]);
    let crossing = find_all(
        &odd,
        doc! {"geo": {"$geoIntersects": {"$geometry": tall}}},
        doc! {},
    )
    .await;
    assert_eq!(
        ids(&crossing),
        vec![Bson::from("horiz"), Bson::from("origin")]
    );
    let long = doc! {"type": "Polygon", "coordinates": [[[89.0, 1.0], [-89.0, 1.0], [-89.0, -1.0], [89.0, -1.0], [89.0, 1.0]]]};
    assert_eq!(
        count(
            &odd,
            doc! {"geo": {"$geoWithin": {"$geometry": long.clone()}}}
        )
        .await,
        3
    );
    assert_eq!(
        count(&odd, doc! {"geo": {"$geoIntersects": {"$geometry": long}}}).await,
        3
    );

    // jstests/core/geo_big_polygon.js: a 20° square given counter-clockwise with the strict
    // winding crs, and the same ring reversed (everything but the square).
    let big = db.collection::<Document>("big");
    let ring = bson::bson!([
        [-5.0, -5.0],
        [5.0, -5.0],
        [5.0, 5.0],
        [-5.0, 5.0],
        [-5.0, -5.0]
    ]);
    big.insert_many(vec![
        doc! {"geo": {"type": "Polygon", "coordinates": [ring.clone()]}},
        doc! {"geo": {"type": "LineString", "coordinates": ring}},
        doc! {"geo": {"type": "Point", "coordinates": [0.0, 0.0]}},
        doc! {"geo": {"type": "Point", "coordinates": [85.0, 85.0]}},
        doc! {"geo": {"type": "LineString", "coordinates": [[-20.0, 0.0], [20.0, 0.0]]}},
    ])
    .await
    .unwrap();
    let strict =
        doc! {"type": "name", "properties": {"name": "urn:x-mongodb:crs:strictwinding:EPSG:4326"}};
    let polygon =
        |ring: Bson| doc! {"type": "Polygon", "coordinates": [ring], "crs": strict.clone()};
    let square = polygon(bson::bson!([
        [10.0, 10.0],
        [-10.0, 10.0],
        [-10.0, -10.0],
        [10.0, -10.0],
        [10.0, 10.0]
    ]));
    let outside = polygon(bson::bson!([
        [10.0, 10.0],
        [10.0, -10.0],
        [-10.0, -10.0],
        [-10.0, 10.0],
        [10.0, 10.0]
    ]));
    let relate = |operator: &str, geometry: &Document| doc! {"geo": {operator: {"$geometry": geometry.clone()}}};
    assert_eq!(count(&big, relate("$geoWithin", &square)).await, 3);
    assert_eq!(count(&big, relate("$geoIntersects", &square)).await, 4);
    assert_eq!(count(&big, relate("$geoWithin", &outside)).await, 1);
    assert_eq!(count(&big, relate("$geoIntersects", &outside)).await, 2);
}

#[tokio::test]
async fn bad_regions_and_unrunnable_near_queries_are_refused_as_mongod_refuses_them() {
    let server = TestServer::start().await;
    let db = server.client().database("geo");
    let collection = db.collection::<Document>("places");
    collection
        .insert_one(doc! {"loc": {"type": "Point", "coordinates": [-73.97, 40.77]}})
        .await
        .unwrap();
    let refusal = |filter: Document| {
        let collection = collection.clone();
        async move {
            let (code, _, message) = command_error(collection.find_one(filter).await);
            (code, message)
        }
    };
    assert_eq!(
        refusal(doc! {"loc": {"$geoWithin": {"$geometry": {"type": "Point", "coordinates": [1, 2]}}}}).await,
        (
            2,
            "$within not supported with provided geometry: { $geoWithin: { $geometry: { type: \"Point\", coordinates: [ 1, 2 ] } } }".into()
        )
    );
    assert_eq!(
        refusal(doc! {"loc": {"$geoIntersects": {"$box": [[0, 0], [1, 1]]}}}).await,
        (
            2,
            "$geoIntersect not supported with provided geometry: { $geoIntersects: { $box: [ [ 0, 0 ], [ 1, 1 ] ] } }".into()
        )
    );
    assert_eq!(
        refusal(doc! {"loc": {"$geoWithin": {"$geometry": {"type": "Polygon", "coordinates": [[[0, 0], [1, 0], [1, 1]]]}}}}).await,
        (
            2,
            "Loop is not closed, first vertex does not equal last vertex: [ [ 0, 0 ], [ 1, 0 ], [ 1, 1 ] ]".into()
        )
    );
    assert_eq!(
        refusal(
            doc! {"loc": {"$geoWithin": {"$centerSphere": [[0, 0], 1], "$center": [[0, 0], 1]}}}
        )
        .await
        .0,
        2
    );
    assert_eq!(
        refusal(doc! {"loc": {"$geoWithin": {}}}).await,
        (2, "geo query doesn't have any geometry".into())
    );
    // Near queries need a geo index (mongod: 291 NoQueryExecutionPlans).
    let near = doc! {"$near": {"$geometry": {"type": "Point", "coordinates": [-73.97, 40.77]}}};
    let (code, message) = refusal(doc! {"loc": near.clone()}).await;
    assert_eq!(code, 291);
    assert!(
        message.ends_with("unable to find index for $geoNear query"),
        "{message}"
    );
    assert!(
        message.contains("GEONEAR  field=loc maxdist=1.79769e+308 isNearSphere=0"),
        "{message}"
    );
    // Placement rules.
    assert_eq!(
        refusal(doc! {"$or": [{"loc": near.clone()}, {"x": 1}]}).await,
        (2, "geo $near must be top-level expr".into())
    );
    assert_eq!(
        refusal(doc! {"loc": near.clone(), "other": {"$nearSphere": [0, 0]}}).await,
        (2, "Too many geoNear expressions".into())
    );
    assert_eq!(
        refusal(doc! {"loc": {"$near": [0, 0], "$maxDistance": -1}}).await,
        (16896, "$maxDistance must be non-negative".into())
    );
    assert_eq!(
        refusal(doc! {"loc": {"$near": [0, 0, -1]}}).await,
        (18522, "max distance must be non-negative".into())
    );
    assert_eq!(
        refusal(doc! {"loc": {"$near": {"$geometry": {"type": "Point", "coordinates": [1000, 1000]}}}}).await,
        (
            2,
            "invalid point in geo near query $geometry argument: { type: \"Point\", coordinates: [ 1000, 1000 ] }  Longitude/latitude is out of bounds, lng: 1000 lat: 1000".into()
        )
    );
    // Contexts that cannot sort by distance: an aggregation $match, countDocuments.
    let (code, _, message) = command_error(collection.count_documents(doc! {"loc": near}).await);
    assert_eq!(code, 5626500);
    assert!(message.starts_with("$geoNear, $near, and $nearSphere are not allowed in this context"));
}

#[tokio::test]
async fn a_position_is_gone_from_geo_queries_the_instant_it_expires() {
    let db = ClockedDb::open(T0, "geo_ttl").await;
    // A Date TTL index on another field: positions expire 60 s after `at`.
    db.run(doc! {"createIndexes": "drivers", "indexes": [
        {"key": {"at": 1}, "name": "at_1", "expireAfterSeconds": 60}
    ]})
    .await;
    let drivers = db.db.collection::<Document>("drivers");
    drivers
        .insert_many(vec![
            doc! {"_id": "old", "at": bson::DateTime::from_millis(T0), "loc": {"type": "Point", "coordinates": [2.35, 48.85]}},
            doc! {"_id": "new", "at": bson::DateTime::from_millis(T0 + 30_000), "loc": {"type": "Point", "coordinates": [2.36, 48.86]}},
        ])
        .await
        .unwrap();
    // The Cosmos model: a collection default TTL of 60 s over `_ts`.
    db.run(doc! {"createIndexes": "devices", "indexes": [
        {"key": {"_ts": 1}, "name": "_ts_1", "expireAfterSeconds": 60}
    ]})
    .await;
    let devices = db.db.collection::<Document>("devices");
    devices
        .insert_one(doc! {"_id": "tracker", "loc": [2.35, 48.85]})
        .await
        .unwrap();
    let paris = doc! {"$geometry": {"type": "Polygon", "coordinates": [[[2.2, 48.8], [2.5, 48.8], [2.5, 48.9], [2.2, 48.9], [2.2, 48.8]]]}};
    let within = doc! {"loc": {"$geoWithin": paris.clone()}};
    let intersects = doc! {"loc": {"$geoIntersects": paris}};
    let sphere = doc! {"loc": {"$geoWithin": {"$centerSphere": [[2.35, 48.85], 0.01]}}};
    let seen = |collection: Collection<Document>, filter: Document| async move {
        let found = ids(&find_all(&collection, filter.clone(), doc! {}).await);
        let counted = collection.count_documents(filter).await.unwrap();
        assert_eq!(found.len() as u64, counted, "find and count agree");
        found
    };
    db.at(59_999);
    assert_eq!(
        seen(drivers.clone(), within.clone()).await,
        vec![Bson::from("new"), Bson::from("old")]
    );
    assert_eq!(
        seen(devices.clone(), sphere.clone()).await,
        vec![Bson::from("tracker")]
    );
    db.at(60_000);
    for filter in [&within, &intersects, &sphere] {
        assert_eq!(
            seen(drivers.clone(), filter.clone()).await,
            vec![Bson::from("new")]
        );
        assert!(seen(devices.clone(), filter.clone()).await.is_empty());
    }
}
