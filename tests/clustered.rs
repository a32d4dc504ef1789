//! Clustered collections and TTL option edge cases through the official driver, with an injected
//! clock. Expected values come from mongod: jstests/core/clustered/clustered_collection_creation.js
//! and jstests/libs/clustered_collections/clustered_collection_util.js (listCollections and
//! listIndexes shapes, error codes), create_collection.cpp `validateClusteredIndexSpec`,
//! clustered_collection_util.cpp (`checkCreationOptions`, `formatClusterKeyForListIndexes`),
//! drop_indexes.cpp (5979800), coll_mod.cpp, coll_mod_index.cpp and index_key_validate.cpp
//! (`validateExpireAfterSeconds`), bsonelement.h (`safeNumberInt`/`safeNumberLong`) and
//! idl_parser.cpp (null fields are absent).

mod common;

use bson::{doc, Bson, Decimal128, Document};
use common::first_batch;

const T0: i64 = 1_700_000_000_000;

/// The manual-clock fixture, with this file's helpers.
type Fixture = common::ClockedDb;

impl Fixture {
    async fn start() -> Fixture {
        Fixture::open(T0, "clustered").await
    }

    async fn fails(&self, command: Document) -> i32 {
        self.error(command).await.0
    }

    /// `_id`s (as Debug strings) found, counted and aggregated in `coll`.
    async fn visible(&self, coll: &str) -> (usize, i64, usize) {
        let found = first_batch(&self.run(doc! {"find": coll, "filter": {}}).await).len();
        let count = self
            .run(doc! {"count": coll, "query": {}})
            .await
            .get_i32("n")
            .map(i64::from)
            .unwrap();
        let aggregated = first_batch(
            &self
                .run(doc! {"aggregate": coll, "pipeline": [{"$match": {}}], "cursor": {}})
                .await,
        )
        .len();
        (found, count, aggregated)
    }
}

fn number(value: Option<&Bson>) -> Option<i64> {
    match value? {
        Bson::Int32(v) => Some(i64::from(*v)),
        Bson::Int64(v) => Some(*v),
        _ => None,
    }
}

fn date(ms_after_t0: i64) -> Bson {
    Bson::DateTime(bson::DateTime::from_millis(T0 + ms_after_t0))
}

fn decimal(text: &str) -> Bson {
    Bson::Decimal128(text.parse::<Decimal128>().unwrap())
}

/// clustered_collection_util.js `validateListCollections` / `validateListIndexes`: the options
/// are filled in (`v: 2`, `name: "_id_"`), the clustered index is listed with `clustered: true`
/// (and, per formatClusterKeyForListIndexes, the collection's `expireAfterSeconds`), no `_id_`
/// index besides it and no `idIndex`.
#[tokio::test]
async fn clustered_collection_is_listed_as_mongod_lists_it() {
    let f = Fixture::start().await;
    f.run(doc! {"create": "c", "clusteredIndex": {"key": {"_id": 1}, "unique": true}, "expireAfterSeconds": 5})
        .await;
    let entry = f.collection_entry("c").await;
    let options = entry.get_document("options").unwrap();
    assert_eq!(
        options.get_document("clusteredIndex").unwrap(),
        &doc! {"v": 2, "key": {"_id": 1}, "name": "_id_", "unique": true}
    );
    assert_eq!(number(options.get("expireAfterSeconds")), Some(5));
    assert!(!entry.contains_key("idIndex"), "{entry}");
    let indexes = f.indexes("c").await;
    assert_eq!(indexes.len(), 1, "{indexes:?}");
    let mut listed = indexes[0].clone();
    assert_eq!(number(listed.get("expireAfterSeconds")), Some(5));
    listed.remove("expireAfterSeconds");
    assert_eq!(
        listed,
        doc! {"v": 2, "key": {"_id": 1}, "name": "_id_", "unique": true, "clustered": true}
    );

    f.run(doc! {"create": "named", "clusteredIndex": {"key": {"_id": 1}, "name": "index_on_id", "unique": true, "v": 2}})
        .await;
    assert_eq!(
        f.indexes("named").await,
        vec![
            doc! {"v": 2, "key": {"_id": 1}, "name": "index_on_id", "unique": true, "clustered": true}
        ]
    );
    // Secondary indexes work beside it (validateCompoundSecondaryIndexes).
    f.run(
        doc! {"createIndexes": "named", "indexes": [{"key": {"a": 1, "_id": 1}, "name": "a_id"}]},
    )
    .await;
    assert_eq!(f.indexes("named").await.len(), 2);

    // `clusteredIndex: false` is a plain collection (validateListCollectionsNotClustered).
    f.run(doc! {"create": "plain", "clusteredIndex": false})
        .await;
    let plain = f.collection_entry("plain").await;
    assert!(!plain
        .get_document("options")
        .unwrap()
        .contains_key("clusteredIndex"));
    assert!(!f.indexes("plain").await[0].contains_key("clustered"));
}

/// clustered_collection_creation.js, with the codes of create_collection.cpp and
/// clustered_collection_util.cpp.
#[tokio::test]
async fn clustered_create_options_are_validated_as_mongod() {
    let f = Fixture::start().await;
    let id_key = doc! {"key": {"_id": 1}, "unique": true};
    let cases: Vec<(Document, i32)> = vec![
        (doc! {"clusteredIndex": {"key": {"_id": 1}}}, 40414),
        (
            doc! {"clusteredIndex": {"key": {"_id": 1}, "unique": false}},
            5_979_700,
        ),
        (
            doc! {"clusteredIndex": {"key": {"randKey": 1}, "unique": true}},
            197,
        ),
        (
            doc! {"clusteredIndex": {"key": {"ts": 1}, "unique": true}},
            197,
        ),
        (
            doc! {"clusteredIndex": {"key": {"_id": 1}, "unique": true, "randField": 1}},
            40415,
        ),
        (
            doc! {"clusteredIndex": {"key": {"_id": 1}, "unique": true, "v": 12345}},
            5_979_704,
        ),
        (
            doc! {"clusteredIndex": id_key.clone(), "expireAfterSeconds": -10},
            72,
        ),
        (doc! {"clusteredIndex": false, "expireAfterSeconds": 5}, 72),
        (doc! {"expireAfterSeconds": 5}, 72),
        (doc! {"clusteredIndex": true}, 5_979_703),
        (
            doc! {"clusteredIndex": id_key.clone(), "viewOn": "sourceColl"},
            6_026_500,
        ),
        (
            doc! {"clusteredIndex": id_key.clone(), "autoIndexId": false},
            6_026_501,
        ),
        (
            doc! {"clusteredIndex": id_key.clone(), "size": 10},
            6_049_200,
        ),
        (
            doc! {"clusteredIndex": id_key.clone(), "max": 10},
            6_049_204,
        ),
        (
            doc! {"clusteredIndex": id_key.clone(), "capped": true},
            6_049_201,
        ),
        (doc! {"clusteredIndex": "yes"}, 14),
        // validateExpireAfterSeconds(kClusteredTTLIndex): not past the time since the epoch.
        (
            doc! {"clusteredIndex": id_key.clone(), "expireAfterSeconds": T0 / 1000 + 1},
            72,
        ),
    ];
    for (options, code) in cases {
        let mut command = doc! {"create": "c"};
        command.extend(options.clone());
        assert_eq!(f.fails(command).await, code, "{options}");
    }
    // Options are validated whatever their order, and before the namespace is looked at.
    f.run(doc! {"create": "c", "expireAfterSeconds": 0, "clusteredIndex": id_key.clone()})
        .await;
    assert_eq!(
        f.fails(doc! {"create": "c", "clusteredIndex": {"key": {"_id": 1}, "unique": false}})
            .await,
        5_979_700
    );
    assert_eq!(f.fails(doc! {"create": "c"}).await, 48);
}

/// clustered_collection_creation.js `validateClusteredIndexUndroppable`: 5979800 by key, by name
/// and in a list; other indexes still drop.
#[tokio::test]
async fn the_clustered_index_cannot_be_dropped_or_hidden() {
    let f = Fixture::start().await;
    f.run(doc! {"create": "c", "clusteredIndex": {"key": {"_id": 1}, "name": "index_on_id", "unique": true}})
        .await;
    f.run(doc! {"createIndexes": "c", "indexes": [{"key": {"a": 1}, "name": "a_1"}]})
        .await;
    for index in [
        Bson::Document(doc! {"_id": 1}),
        Bson::from("index_on_id"),
        Bson::Array(vec![Bson::from("index_on_id")]),
    ] {
        assert_eq!(
            f.fails(doc! {"dropIndexes": "c", "index": index.clone()})
                .await,
            5_979_800,
            "{index}"
        );
    }
    // coll_mod.cpp: 6011800.
    assert_eq!(
        f.fails(doc! {"collMod": "c", "index": {"name": "index_on_id", "hidden": true}})
            .await,
        6_011_800
    );
    f.run(doc! {"dropIndexes": "c", "index": "a_1"}).await;
    assert_eq!(f.indexes("c").await.len(), 1);
}

/// A clustered TTL is a TTL index on `_id`: a Date `_id` expires at `_id + expireAfterSeconds`,
/// invisible at that instant on every read path and deleted by the reaper; any other `_id` never
/// expires (mongod's TTL monitor deletes by the clustered key's Date only).
#[tokio::test]
async fn date_ids_expire_at_id_plus_expire_after_seconds() {
    let f = Fixture::start().await;
    f.run(doc! {"create": "c", "clusteredIndex": {"key": {"_id": 1}, "unique": true}, "expireAfterSeconds": 10})
        .await;
    f.run(doc! {"insert": "c", "documents": [
        {"_id": date(0), "k": "doomed"},
        {"_id": date(60_000), "k": "later"},
        {"_id": "a string", "k": "never"},
        {"_id": 42, "k": "never"},
        {"_id": bson::oid::ObjectId::new(), "k": "never"},
    ]})
    .await;
    f.at(9_999);
    assert_eq!(f.visible("c").await, (5, 5, 5), "one millisecond before");
    f.at(10_000);
    assert_eq!(f.visible("c").await, (4, 4, 4), "at the expiry instant");
    assert_eq!(
        first_batch(&f.run(doc! {"find": "c", "filter": {"_id": date(0)}}).await).len(),
        0,
        "an _id lookup does not see it either"
    );
    assert_eq!(f.ttl_pass().await, 1);
    f.at(70_000);
    assert_eq!(f.visible("c").await, (3, 3, 3));
    assert_eq!(f.ttl_pass().await, 1);
    f.at(10 * 365 * 86_400_000);
    assert_eq!(
        f.visible("c").await,
        (3, 3, 3),
        "non-Date _ids never expire"
    );
    assert_eq!(f.ttl_pass().await, 0);
}

/// coll_mod.cpp: top-level `expireAfterSeconds` changes a clustered collection's TTL (`"off"`
/// disables it); only on collections clustered by `_id`; a string other than `"off"` and a
/// negative number are 72. Expiry stays final across the change.
#[tokio::test]
async fn coll_mod_changes_the_clustered_ttl() {
    let f = Fixture::start().await;
    f.run(doc! {"create": "c", "clusteredIndex": {"key": {"_id": 1}, "unique": true}, "expireAfterSeconds": 10})
        .await;
    f.run(doc! {"insert": "c", "documents": [{"_id": date(0)}, {"_id": date(50_000)}]})
        .await;
    f.at(20_000);
    assert_eq!(f.visible("c").await.0, 1);
    f.run(doc! {"collMod": "c", "expireAfterSeconds": 100})
        .await;
    let entry = f.collection_entry("c").await;
    assert_eq!(
        number(
            entry
                .get_document("options")
                .unwrap()
                .get("expireAfterSeconds")
        ),
        Some(100)
    );
    assert_eq!(
        f.visible("c").await.0,
        1,
        "an expired document stays expired"
    );
    f.at(149_999);
    assert_eq!(f.visible("c").await.0, 1);
    f.at(150_000);
    assert_eq!(f.visible("c").await.0, 0);

    // Expires at 240 s; `"off"` at 150 s keeps it for good.
    f.run(doc! {"insert": "c", "documents": [{"_id": date(140_000)}]})
        .await;
    f.run(doc! {"collMod": "c", "expireAfterSeconds": "off"})
        .await;
    f.at(10 * 86_400_000);
    assert_eq!(f.visible("c").await.0, 1, "off: Date _ids no longer expire");
    assert_eq!(f.ttl_pass().await, 0);
    let entry = f.collection_entry("c").await;
    assert!(!entry
        .get_document("options")
        .unwrap()
        .contains_key("expireAfterSeconds"));
    assert!(!f.indexes("c").await[0].contains_key("expireAfterSeconds"));

    assert_eq!(
        f.fails(doc! {"collMod": "c", "expireAfterSeconds": "on"})
            .await,
        72
    );
    assert_eq!(
        f.fails(doc! {"collMod": "c", "expireAfterSeconds": -1})
            .await,
        72
    );
    assert_eq!(
        f.fails(doc! {"collMod": "c", "expireAfterSeconds": true})
            .await,
        14
    );
    f.run(doc! {"create": "plain"}).await;
    assert_eq!(
        f.fails(doc! {"collMod": "plain", "expireAfterSeconds": 5})
            .await,
        72
    );
}

/// coll_mod.idl reads `index.expireAfterSeconds` as `safeInt` (bsonelement.h `safeNumberInt`:
/// NaN → 0, doubles truncated, Decimal128 rounded half to even by `Decimal128::toLong`), then
/// index_key_validate.cpp refuses a negative result with 72; idl_parser.cpp ignores a null field
/// (so `{expireAfterSeconds: null}` alone is coll_mod.cpp's 72 "no expireAfterSeconds, hidden,
/// unique, or prepareUnique field"); coll_mod_index.cpp echoes `_old`/`_new` even when unchanged.
#[tokio::test]
async fn coll_mod_index_expire_after_seconds_edge_cases() {
    let f = Fixture::start().await;
    f.run(doc! {"createIndexes": "c", "indexes": [{"key": {"t": 1}, "name": "t_1", "expireAfterSeconds": 100}]})
        .await;
    let cases = [
        (decimal("2.5"), 2),
        (decimal("3.5"), 4),
        (decimal("7.51"), 8),
        (Bson::Double(7.9), 7),
        (Bson::Double(-0.5), 0),
        (decimal("-0.5"), 0),
        (Bson::Double(f64::NAN), 0),
        (decimal("NaN"), 0),
        (Bson::Int64(1 << 40), i64::from(i32::MAX)),
    ];
    let mut old = 100;
    for (value, stored) in cases {
        let reply = f
            .run(doc! {"collMod": "c", "index": {"name": "t_1", "expireAfterSeconds": value.clone()}})
            .await;
        assert_eq!(
            (
                number(reply.get("expireAfterSeconds_old")),
                number(reply.get("expireAfterSeconds_new"))
            ),
            (Some(old), Some(stored)),
            "{value}"
        );
        old = stored;
        let listed = f.indexes("c").await[1].clone();
        assert_eq!(
            number(listed.get("expireAfterSeconds")),
            Some(stored),
            "{value}"
        );
    }
    // The same value again still answers with both.
    let reply = f
        .run(doc! {"collMod": "c", "index": {"name": "t_1", "expireAfterSeconds": i32::MAX}})
        .await;
    assert_eq!(number(reply.get("expireAfterSeconds_old")), Some(old));
    assert_eq!(
        number(reply.get("expireAfterSeconds_new")),
        Some(i64::from(i32::MAX))
    );
    for (value, code) in [
        (Bson::Null, 72),
        (Bson::Double(-1.0), 72),
        (decimal("-0.51"), 72),
        (Bson::from("5"), 14),
    ] {
        assert_eq!(
            f.fails(
                doc! {"collMod": "c", "index": {"name": "t_1", "expireAfterSeconds": value.clone()}}
            )
            .await,
            code,
            "{value}"
        );
    }
}
