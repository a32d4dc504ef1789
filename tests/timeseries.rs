//! Time-series collections through the official driver, with an injected clock. Expected values
//! come from the MongoDB manual (core/timeseries/timeseries-procedures: the `weather` example and
//! its query results; timeseries-automatic-removal) and mongod: jstests/core/timeseries/ddl/
//! (timeseries_create.js, bucket_span_and_rounding_seconds.js, timeseries_collmod.js,
//! timeseries_list_collections.js, timeseries_index_spec.js, timeseries_metric_index_hashed.js),
//! create_command.cpp, timeseries_options.cpp, bucket_catalog_helpers.cpp (`extractTime`),
//! timeseries_commands_conversion_helper.cpp (index rules), coll_mod.cpp and
//! sharding_ddl_util/rename (renaming refused).

mod common;

use bson::{doc, Bson, Document};
use common::{command_error, first_batch};

/// 2021-05-18T00:00:00Z, the first measurement of the manual's `weather` example.
const T0: i64 = 1_621_296_000_000;
const HOUR: i64 = 3_600_000;

/// The manual-clock fixture, with this file's helpers.
type Fixture = common::ClockedDb;

impl Fixture {
    async fn start() -> Fixture {
        Fixture::open(T0, "ts").await
    }

    async fn fails(&self, command: Document) -> (i32, String) {
        self.error(command).await
    }

    async fn find(&self, coll: &str, filter: Document) -> Vec<Document> {
        first_batch(
            &self
                .run(doc! {"find": coll, "filter": filter, "batchSize": 1000})
                .await,
        )
    }

    /// How many measurements `find`, `count`, `aggregate` and `distinct` see.
    async fn visible(&self, coll: &str) -> [usize; 4] {
        let found = self.find(coll, doc! {}).await.len();
        let count = self
            .run(doc! {"count": coll, "query": {}})
            .await
            .get_i32("n")
            .unwrap() as usize;
        let aggregated = first_batch(
            &self
                .run(doc! {"aggregate": coll, "pipeline": [{"$match": {}}], "cursor": {}})
                .await,
        )
        .len();
        let distinct = self
            .run(doc! {"distinct": coll, "key": "_id"})
            .await
            .get_array("values")
            .unwrap()
            .len();
        [found, count, aggregated, distinct]
    }
}

fn date(ms_after_t0: i64) -> Bson {
    Bson::DateTime(bson::DateTime::from_millis(T0 + ms_after_t0))
}

fn sensor() -> Document {
    doc! {"sensorId": 5578, "type": "temperature"}
}

/// The manual's `weather` measurements: every four hours over two days.
fn weather() -> Vec<Document> {
    let temps = [12, 11, 11, 12, 16, 15, 13, 12, 11, 12, 17, 12];
    temps
        .iter()
        .enumerate()
        .map(|(step, temp)| {
            doc! {"metadata": sensor(), "timestamp": date(step as i64 * 4 * HOUR), "temp": *temp}
        })
        .collect()
}

/// timeseries-procedures: create, insert, query and aggregate the `weather` collection; how
/// listCollections (timeseries_list_collections.js) and listIndexes (the `<meta>_1_<time>_1`
/// index mongod ≥ 6.3 creates) show it.
#[tokio::test]
async fn the_manuals_weather_example() {
    let f = Fixture::start().await;
    f.run(doc! {"create": "weather", "timeseries": {"timeField": "timestamp", "metaField": "metadata", "granularity": "hours"}})
        .await;
    assert_eq!(
        f.collection_entry("weather").await,
        doc! {
            "name": "weather",
            "type": "timeseries",
            "options": {"timeseries": {"timeField": "timestamp", "metaField": "metadata", "granularity": "hours", "bucketMaxSpanSeconds": 2_592_000}},
            "info": {"readOnly": false},
        }
    );
    assert_eq!(
        f.indexes("weather").await,
        vec![
            doc! {"v": 2, "key": {"metadata": 1, "timestamp": 1}, "name": "metadata_1_timestamp_1"}
        ]
    );
    let inserted = f
        .run(doc! {"insert": "weather", "documents": weather()})
        .await;
    assert_eq!(inserted.get_i32("n").unwrap(), 12);

    // "db.weather.findOne({timestamp: ISODate("2021-05-18T00:00:00.000Z")})": the time field
    // first, then the meta field, then the measurement, `_id` last.
    let found = f.find("weather", doc! {"timestamp": date(0)}).await;
    assert_eq!(found.len(), 1);
    let mut first = found[0].clone();
    assert!(matches!(first.remove("_id"), Some(Bson::ObjectId(_))));
    assert_eq!(
        first,
        doc! {"timestamp": date(0), "metadata": sensor(), "temp": 12}
    );
    assert_eq!(
        found[0].keys().collect::<Vec<_>>(),
        ["timestamp", "metadata", "temp", "_id"]
    );

    // The manual's aggregation: the average temperature per day.
    let reply = f
        .run(doc! {"aggregate": "weather", "pipeline": [
            {"$project": {"date": {"$dateToParts": {"date": "$timestamp"}}, "temp": 1}},
            {"$group": {"_id": {"date": {"year": "$date.year", "month": "$date.month", "day": "$date.day"}}, "avgTmp": {"$avg": "$temp"}}},
            {"$sort": {"_id.date.day": 1}},
        ], "cursor": {}})
        .await;
    assert_eq!(
        first_batch(&reply),
        vec![
            doc! {"_id": {"date": {"year": 2021, "month": 5, "day": 18}}, "avgTmp": 77.0 / 6.0},
            doc! {"_id": {"date": {"year": 2021, "month": 5, "day": 19}}, "avgTmp": 77.0 / 6.0},
        ]
    );

    // A time range reads only the measurements in it (the time index), with or without the
    // meta field.
    for filter in [
        doc! {"timestamp": {"$gte": date(8 * HOUR), "$lt": date(20 * HOUR)}},
        doc! {"metadata": sensor(), "timestamp": {"$gte": date(8 * HOUR), "$lt": date(20 * HOUR)}},
    ] {
        let explained = f
            .run(doc! {"explain": {"find": "weather", "filter": filter.clone()}, "verbosity": "executionStats"})
            .await;
        let stats = explained.get_document("executionStats").unwrap();
        assert_eq!(stats.get_i32("nReturned").unwrap(), 3, "{filter}");
        assert_eq!(stats.get_i32("totalDocsExamined").unwrap(), 3, "{filter}");
    }
    let counted = f
        .run(doc! {"count": "weather", "query": {"metadata.sensorId": 5578, "temp": {"$gt": 12}}})
        .await;
    assert_eq!(counted.get_i32("n").unwrap(), 4);

    // Updates and deletes take any filter (mongod ≥ 8.0).
    let updated = f
        .run(doc! {"update": "weather", "updates": [{"q": {"temp": 11}, "u": {"$inc": {"temp": 100}}, "multi": true}]})
        .await;
    assert_eq!(updated.get_i32("nModified").unwrap(), 3);
    let deleted = f
        .run(doc! {"delete": "weather", "deletes": [{"q": {"temp": {"$gt": 100}}, "limit": 1}]})
        .await;
    assert_eq!(deleted.get_i32("n").unwrap(), 1);
    assert_eq!(f.visible("weather").await, [11; 4]);
}

/// bucket_catalog_helpers.cpp `extractTime`: every measurement needs a Date at the time field
/// (2 BadValue, a write error per document), on insert, update, replacement and upsert, even
/// with `bypassDocumentValidation`.
#[tokio::test]
async fn every_write_needs_a_date_at_the_time_field() {
    let f = Fixture::start().await;
    f.run(doc! {"create": "m", "timeseries": {"timeField": "t", "metaField": "tag"}})
        .await;
    let message = "'t' must be present and contain a valid BSON UTC datetime value";
    let reply = f
        .run(doc! {"insert": "m", "documents": [
            {"t": date(0), "v": 1},
            {"v": 2},
            {"t": date(1), "v": 3},
        ]})
        .await;
    assert_eq!(
        reply.get_i32("n").unwrap(),
        1,
        "ordered: stops at the first error"
    );
    let errors = reply.get_array("writeErrors").unwrap();
    assert_eq!(
        errors[0].as_document().unwrap(),
        &doc! {"index": 1, "code": 2, "errmsg": message}
    );
    let reply = f
        .run(
            doc! {"insert": "m", "ordered": false, "bypassDocumentValidation": true, "documents": [
                {"t": "2021-05-18", "v": 4},
                {"t": date(2), "v": 5},
                {"t": bson::Timestamp {time: 1, increment: 1}, "v": 6},
            ]},
        )
        .await;
    assert_eq!(reply.get_i32("n").unwrap(), 1);
    let indexes: Vec<i32> = reply
        .get_array("writeErrors")
        .unwrap()
        .iter()
        .map(|error| error.as_document().unwrap().get_i32("index").unwrap())
        .collect();
    assert_eq!(indexes, [0, 2]);

    for update in [
        doc! {"q": {"v": 1}, "u": {"$set": {"t": "today"}}},
        doc! {"q": {"v": 1}, "u": {"$unset": {"t": 1}}},
        doc! {"q": {"v": 1}, "u": {"v": 7}},
        doc! {"q": {"v": 99}, "u": {"$set": {"w": 1}}, "upsert": true},
    ] {
        let reply = f
            .run(doc! {"update": "m", "updates": [update.clone()]})
            .await;
        let error = reply.get_array("writeErrors").unwrap()[0]
            .as_document()
            .unwrap()
            .clone();
        assert_eq!(error.get_i32("code").unwrap(), 2, "{update}");
        assert_eq!(error.get_str("errmsg").unwrap(), message, "{update}");
    }
    // A measurement stays laid out as mongod returns them after an update that moves fields.
    f.run(
        doc! {"update": "m", "updates": [{"q": {"v": 1}, "u": {"v": 8, "tag": "x", "t": date(5)}}]},
    )
    .await;
    let found = f.find("m", doc! {"v": 8}).await;
    assert_eq!(
        found[0].keys().collect::<Vec<_>>(),
        ["t", "tag", "v", "_id"]
    );
    // An upsert that sets the time field inserts.
    let reply = f
        .run(doc! {"update": "m", "updates": [{"q": {"v": 50}, "u": {"$set": {"t": date(9)}}, "upsert": true}]})
        .await;
    assert_eq!(reply.get_array("upserted").unwrap().len(), 1);
    assert_eq!(f.visible("m").await, [3; 4]);
}

/// timeseries-automatic-removal: "The expiration threshold is the timeField field value plus the
/// specified number of seconds." tideway applies it per measurement (mongod waits until every
/// measurement of a bucket has expired): invisible on every read path from the instant
/// `time + expireAfterSeconds <= now`, then deleted by the reaper; `collMod` changes or turns
/// off the TTL.
#[tokio::test]
async fn each_measurement_expires_at_its_time_plus_expire_after_seconds() {
    let f = Fixture::start().await;
    f.run(doc! {"create": "m", "timeseries": {"timeField": "t", "metaField": "tag"}, "expireAfterSeconds": 10})
        .await;
    let entry = f.collection_entry("m").await;
    assert_eq!(
        entry
            .get_document("options")
            .unwrap()
            .get("expireAfterSeconds"),
        Some(&Bson::Int64(10))
    );
    f.run(doc! {"insert": "m", "documents": [
        {"t": date(0), "tag": "a", "v": 1},
        {"t": date(5_000), "tag": "a", "v": 2},
        {"t": date(60_000), "tag": "b", "v": 3},
    ]})
    .await;
    f.at(9_999);
    assert_eq!(f.visible("m").await, [3; 4], "one millisecond before");
    f.at(10_000);
    assert_eq!(f.visible("m").await, [2; 4], "at the expiry instant");
    f.at(10_001);
    assert_eq!(f.visible("m").await, [2; 4], "one millisecond after");
    assert!(f.find("m", doc! {"v": 1}).await.is_empty());
    assert!(f
        .find("m", doc! {"t": {"$lt": date(1_000)}})
        .await
        .is_empty());
    assert_eq!(f.ttl_pass().await, 1, "physically deleted");
    assert_eq!(f.ttl_pass().await, 0);
    // The second measurement of the same series expires on its own, 5 s later.
    f.at(15_000);
    assert_eq!(f.visible("m").await, [1; 4]);
    assert_eq!(f.ttl_pass().await, 1);

    // collMod: a longer TTL, then off.
    f.run(doc! {"collMod": "m", "expireAfterSeconds": 100})
        .await;
    f.at(159_999);
    assert_eq!(f.visible("m").await, [1; 4]);
    f.at(160_000);
    assert_eq!(f.visible("m").await, [0; 4]);
    f.run(doc! {"insert": "m", "documents": [{"t": date(160_000), "tag": "c"}]})
        .await;
    f.run(doc! {"collMod": "m", "expireAfterSeconds": "off"})
        .await;
    f.at(100 * 86_400_000);
    assert_eq!(f.visible("m").await, [1; 4], "off: nothing expires");
    assert_eq!(
        f.ttl_pass().await,
        0,
        "collMod deleted what had expired under the old TTL"
    );
    assert!(!f
        .collection_entry("m")
        .await
        .get_document("options")
        .unwrap()
        .contains_key("expireAfterSeconds"));
    assert_eq!(
        f.fails(doc! {"collMod": "m", "expireAfterSeconds": "on"})
            .await
            .0,
        72
    );
    assert_eq!(
        f.fails(doc! {"collMod": "m", "expireAfterSeconds": -1})
            .await
            .0,
        72
    );
}

/// create_command.cpp, create_collection.cpp and timeseries_options.cpp: the option's IDL, the
/// options allowed with it, the field names and the bucketing, with mongod's codes.
#[tokio::test]
async fn create_validates_as_mongod() {
    let f = Fixture::start().await;
    let refused = [
        (doc! {"timeseries": {"metaField": "m"}}, 40414),
        (doc! {"timeseries": {"timeField": 1}}, 14),
        (
            doc! {"timeseries": {"timeField": "t", "invalidOption": {}}},
            40415,
        ),
        (
            doc! {"timeseries": {"timeField": "t", "granularity": "days"}},
            2,
        ),
        (doc! {"timeseries": "t"}, 14),
        (
            doc! {"timeseries": {"timeField": "t"}, "capped": true, "size": 4096},
            72,
        ),
        (
            doc! {"timeseries": {"timeField": "t"}, "validator": {"a": 1}},
            72,
        ),
        (
            doc! {"timeseries": {"timeField": "t"}, "clusteredIndex": {"key": {"_id": 1}, "unique": true}},
            72,
        ),
        (
            doc! {"timeseries": {"timeField": "t"}, "idIndex": {"key": {"_id": 1}, "name": "_id_"}},
            72,
        ),
        (doc! {"timeseries": {"timeField": "a.b"}}, 72),
        (
            doc! {"timeseries": {"timeField": "t", "metaField": "_id"}},
            72,
        ),
        (
            doc! {"timeseries": {"timeField": "t", "metaField": "t"}},
            72,
        ),
        (
            doc! {"timeseries": {"timeField": "t", "metaField": "m.n"}},
            72,
        ),
        (
            doc! {"timeseries": {"timeField": "t", "bucketMaxSpanSeconds": 3600}},
            72,
        ),
        (
            doc! {"timeseries": {"timeField": "t", "bucketMaxSpanSeconds": 100, "bucketRoundingSeconds": 50}},
            72,
        ),
        (
            doc! {"timeseries": {"timeField": "t", "granularity": "minutes", "bucketMaxSpanSeconds": 3600}},
            72,
        ),
        (
            doc! {"timeseries": {"timeField": "t", "granularity": "minutes", "bucketRoundingSeconds": 3600}},
            72,
        ),
        (
            doc! {"timeseries": {"timeField": "t", "bucketMaxSpanSeconds": 0, "bucketRoundingSeconds": 0}},
            2,
        ),
        (
            doc! {"timeseries": {"timeField": "t", "bucketMaxSpanSeconds": 31_536_001, "bucketRoundingSeconds": 31_536_001}},
            2,
        ),
        (
            doc! {"timeseries": {"timeField": "t"}, "expireAfterSeconds": -1},
            72,
        ),
        (
            doc! {"timeseries": {"timeField": "t"}, "expireAfterSeconds": ""},
            14,
        ),
        (
            doc! {"timeseries": {"timeField": "t"}, "expireAfterSeconds": 4_611_686_018_427_387_904_i64},
            72,
        ),
    ];
    for (options, code) in refused {
        let mut command = doc! {"create": "bad"};
        command.extend(options.clone());
        assert_eq!(f.fails(command).await.0, code, "{options}");
    }
    let (_, message) = f
        .fails(doc! {"create": "bad", "timeseries": {"timeField": "t"}, "validator": {"a": 1}})
        .await;
    assert_eq!(
        message,
        "ts.bad: 'timeseries' is not allowed with 'validator'"
    );
    assert!(f
        .run(doc! {"listCollections": 1, "filter": {"name": "bad"}})
        .await
        .get_document("cursor")
        .unwrap()
        .get_array("firstBatch")
        .unwrap()
        .is_empty());

    // A custom equal pair is stored without a granularity; collation, storageEngine and
    // `capped: false` may go with a time series.
    f.run(doc! {"create": "custom", "timeseries": {"timeField": "t", "bucketMaxSpanSeconds": 300, "bucketRoundingSeconds": 300}, "capped": false, "collation": {"locale": "simple"}})
        .await;
    assert_eq!(
        f.collection_entry("custom")
            .await
            .get_document("options")
            .unwrap()
            .get_document("timeseries")
            .unwrap(),
        &doc! {"timeField": "t", "bucketRoundingSeconds": 300, "bucketMaxSpanSeconds": 300}
    );
    assert!(
        f.indexes("custom").await.is_empty(),
        "no index without a metaField"
    );
    // The same options again succeed (granularity seconds is the default); others are 48.
    f.run(doc! {"create": "plain_ts", "timeseries": {"timeField": "t"}})
        .await;
    f.run(doc! {"create": "plain_ts", "timeseries": {"timeField": "t", "granularity": "seconds"}})
        .await;
    assert_eq!(
        f.fails(doc! {"create": "plain_ts", "timeseries": {"timeField": "t", "metaField": "m"}})
            .await
            .0,
        48
    );
    f.run(doc! {"create": "ordinary"}).await;
    assert_eq!(
        f.fails(doc! {"create": "ordinary", "timeseries": {"timeField": "t"}})
            .await,
        (
            48,
            "namespace 'ts.ordinary' already exists, but is not a timeseries collection".into()
        )
    );
    // Without a time series or a clustered index, expireAfterSeconds is refused.
    assert_eq!(
        f.fails(doc! {"create": "bad", "expireAfterSeconds": 10})
            .await
            .0,
        72
    );
}

/// timeseries_commands_conversion_helper.cpp and createIndexes: which indexes a time series
/// takes; the internal ones are never listed, dropped or modified.
#[tokio::test]
async fn indexes_follow_mongods_time_series_rules() {
    let f = Fixture::start().await;
    f.run(doc! {"create": "m", "timeseries": {"timeField": "t", "metaField": "tag"}, "expireAfterSeconds": 60})
        .await;
    let refused = [
        (doc! {"v": "text"}, 72),
        (doc! {"tag": "text"}, 72),
        (doc! {"v": "hashed"}, 67),
        (doc! {"_id": "hashed"}, 67),
        (doc! {"x": 1, "y": "hashed"}, 67),
        (doc! {"t": "hashed"}, 67),
        (doc! {"$**": 1}, 67),
    ];
    for (key, code) in refused {
        let command = doc! {"createIndexes": "m", "indexes": [{"key": key.clone(), "name": "i"}]};
        assert_eq!(f.fails(command).await.0, code, "{key}");
    }
    let refused_options = [
        (doc! {"key": {"tag": 1}, "name": "i", "unique": true}, 72),
        (doc! {"key": {"v": 1}, "name": "i", "sparse": true}, 72),
        (
            doc! {"key": {"v": 1}, "name": "i", "partialFilterExpression": {"v": {"$gt": 5}}, "collation": {"locale": "en"}},
            85,
        ),
        (
            doc! {"key": {"t": 1}, "name": "i", "expireAfterSeconds": 10},
            72,
        ),
        (
            doc! {"key": {"t": 1}, "name": "i", "expireAfterSeconds": 10, "partialFilterExpression": {"v": 1}},
            72,
        ),
        (
            doc! {"key": {"t": 1, "tag": 1}, "name": "i", "expireAfterSeconds": 10, "partialFilterExpression": {"tag": "a"}},
            67,
        ),
        (
            doc! {"key": {"v": 1}, "name": "i", "expireAfterSeconds": 10, "partialFilterExpression": {"tag": "a"}},
            72,
        ),
    ];
    for (spec, code) in refused_options {
        let command = doc! {"createIndexes": "m", "indexes": [spec.clone()]};
        assert_eq!(f.fails(command).await.0, code, "{spec}");
    }
    let (_, message) = f
        .fails(doc! {"createIndexes": "m", "indexes": [{"key": {"x": "hashed"}, "name": "i"}]})
        .await;
    assert_eq!(
        message,
        "BadValue: Invalid index spec for time-series collection: { x: \"hashed\" }. Indexes on measurement fields must be ascending or descending (numbers only), or '2dsphere': x: \"hashed\""
    );
    for spec in [
        doc! {"key": {"t": -1}, "name": "t_-1"},
        doc! {"key": {"t": 1, "v": 1}, "name": "t_1_v_1"},
        doc! {"key": {"tag": "hashed"}, "name": "tag_hashed"},
        doc! {"key": {"v": 1, "tag": 1}, "name": "v_1_tag_1", "partialFilterExpression": {"v": {"$gt": 5}}},
        doc! {"key": {"tag": 1}, "name": "tag_1", "sparse": true},
        doc! {"key": {"t": 1}, "name": "ttl", "expireAfterSeconds": 10, "partialFilterExpression": {"tag": "a"}},
    ] {
        f.run(doc! {"createIndexes": "m", "indexes": [spec]}).await;
    }
    let names: Vec<String> = f
        .indexes("m")
        .await
        .iter()
        .map(|index| index.get_str("name").unwrap().to_string())
        .collect();
    assert_eq!(
        names,
        [
            "tag_1_t_1",
            "t_-1",
            "t_1_v_1",
            "tag_hashed",
            "v_1_tag_1",
            "tag_1",
            "ttl"
        ]
    );
    assert_eq!(
        f.fails(doc! {"collMod": "m", "index": {"name": "_id_", "hidden": true}})
            .await
            .0,
        27
    );
    assert_eq!(
        f.fails(doc! {"collMod": "m", "index": {"name": "ttl", "expireAfterSeconds": 5}})
            .await
            .0,
        72
    );
    f.run(doc! {"collMod": "m", "index": {"name": "t_1_v_1", "hidden": true}})
        .await;
    let dropped = f.run(doc! {"dropIndexes": "m", "index": "*"}).await;
    assert_eq!(dropped.get_i32("nIndexesWas").unwrap(), 7);
    assert!(f.indexes("m").await.is_empty());

    // The collection's own TTL still reads its internal time index.
    f.run(doc! {"insert": "m", "documents": [{"t": date(0), "tag": "a"}, {"t": date(120_000), "tag": "a"}]})
        .await;
    f.at(60_000);
    assert_eq!(f.ttl_pass().await, 1);
    assert_eq!(f.visible("m").await, [1; 4]);
}

/// timeseries_collmod.js and timeseries_options.cpp: the granularity only grows, a custom pair
/// is equal and never shrinks; the options a time series refuses and `timeseries` elsewhere.
#[tokio::test]
async fn coll_mod_changes_bucketing_as_mongod_allows() {
    let f = Fixture::start().await;
    f.run(doc! {"create": "m", "timeseries": {"timeField": "t", "metaField": "tag"}})
        .await;
    let spec = |entry: Document| {
        entry
            .get_document("options")
            .unwrap()
            .get_document("timeseries")
            .unwrap()
            .clone()
    };
    f.run(doc! {"collMod": "m", "timeseries": {"granularity": "minutes"}})
        .await;
    assert_eq!(
        spec(f.collection_entry("m").await),
        doc! {"timeField": "t", "metaField": "tag", "granularity": "minutes", "bucketMaxSpanSeconds": 86_400}
    );
    let refused = [
        (doc! {"timeseries": {"granularity": "seconds"}}, 72),
        (
            doc! {"timeseries": {"granularity": "hours", "bucketMaxSpanSeconds": 100}},
            72,
        ),
        (
            doc! {"timeseries": {"granularity": "hours", "bucketRoundingSeconds": 100}},
            72,
        ),
        (doc! {"timeseries": {"bucketMaxSpanSeconds": 100_000}}, 72),
        (
            doc! {"timeseries": {"bucketMaxSpanSeconds": 100_000, "bucketRoundingSeconds": 90_000}},
            72,
        ),
        (
            doc! {"timeseries": {"bucketMaxSpanSeconds": 100, "bucketRoundingSeconds": 100}},
            72,
        ),
        (doc! {"timeseries": {"granularity": "weeks"}}, 2),
        (doc! {"timeseries": {"other": 1}}, 40415),
        (doc! {"validator": {"a": 1}}, 72),
        (doc! {"validationLevel": "off"}, 72),
        (doc! {"cappedSize": 4096}, 72),
    ];
    for (change, code) in refused {
        let mut command = doc! {"collMod": "m"};
        command.extend(change.clone());
        assert_eq!(f.fails(command).await.0, code, "{change}");
    }
    f.run(doc! {"collMod": "m", "timeseries": {"bucketMaxSpanSeconds": 100_000, "bucketRoundingSeconds": 100_000}})
        .await;
    assert_eq!(
        spec(f.collection_entry("m").await),
        doc! {"timeField": "t", "metaField": "tag", "bucketRoundingSeconds": 100_000, "bucketMaxSpanSeconds": 100_000}
    );
    f.run(doc! {"collMod": "m", "timeseries": {}}).await;
    // From a custom pair, a granularity whose defaults are below it is refused.
    assert_eq!(
        f.fails(doc! {"collMod": "m", "timeseries": {"granularity": "hours"}})
            .await,
        (
            72,
            "Timeseries 'bucketRoundingSeconds' needs to be equal or greater to transition".into()
        )
    );
    f.run(doc! {"create": "small", "timeseries": {"timeField": "t", "bucketMaxSpanSeconds": 200, "bucketRoundingSeconds": 200}})
        .await;
    f.run(doc! {"collMod": "small", "timeseries": {"granularity": "minutes"}})
        .await;
    assert_eq!(
        spec(f.collection_entry("small").await),
        doc! {"timeField": "t", "granularity": "minutes", "bucketMaxSpanSeconds": 86_400}
    );
    f.run(doc! {"create": "plain"}).await;
    assert_eq!(
        f.fails(doc! {"collMod": "plain", "timeseries": {"granularity": "hours"}})
            .await,
        (
            72,
            "option only supported on a time-series collection: timeseries".into()
        )
    );
}

/// Other commands on a time series: renaming is refused (20, as a standalone mongod), `$merge`
/// finds no unique index to merge on (51183), `$out` into an existing time series writes
/// measurements through the same checks, `drop` removes it.
#[tokio::test]
async fn other_commands_on_a_time_series() {
    let f = Fixture::start().await;
    f.run(doc! {"create": "m", "timeseries": {"timeField": "t"}})
        .await;
    f.run(doc! {"insert": "src", "documents": [{"_id": 1, "t": date(0), "v": 1}, {"_id": 2, "t": date(1), "v": 2}]})
        .await;
    let renamed =
        f.db.client()
            .database("admin")
            .run_command(doc! {"renameCollection": "ts.m", "to": "ts.n"})
            .await;
    assert_eq!(
        command_error(renamed),
        (
            20,
            "IllegalOperation".into(),
            "Renaming a timeseries collection is not allowed".into()
        )
    );
    assert_eq!(
        f.fails(doc! {"aggregate": "src", "pipeline": [{"$merge": {"into": "m"}}], "cursor": {}})
            .await
            .0,
        51183
    );
    f.run(doc! {"aggregate": "src", "pipeline": [{"$out": "m"}], "cursor": {}})
        .await;
    assert_eq!(f.visible("m").await, [2; 4]);
    assert_eq!(
        f.find("m", doc! {"v": 1}).await[0]
            .keys()
            .collect::<Vec<_>>(),
        ["t", "v", "_id"]
    );
    assert_eq!(
        f.collection_entry("m").await.get_str("type").unwrap(),
        "timeseries"
    );
    let (code, _) = f
        .fails(doc! {"aggregate": "src", "pipeline": [{"$project": {"t": 0}}, {"$out": "m"}], "cursor": {}})
        .await;
    assert_eq!(code, 2, "measurements without a time are refused");
    assert_eq!(f.visible("m").await, [2; 4], "and the target is unchanged");
    // A time series is a view in mongod's catalog: neither converts to capped (166).
    assert_eq!(
        f.fails(doc! {"convertToCapped": "m", "size": 100_000})
            .await
            .0,
        166
    );
    assert_eq!(
        f.fails(doc! {"cloneCollectionAsCapped": "m", "toCollection": "c", "size": 100_000})
            .await
            .0,
        166
    );
    f.run(doc! {"drop": "m"}).await;
    assert!(f
        .run(doc! {"listCollections": 1, "filter": {"name": "m"}})
        .await
        .get_document("cursor")
        .unwrap()
        .get_array("firstBatch")
        .unwrap()
        .is_empty());
}
