//! Schema validation through the driver: `create`/`collMod` `validator`, `validationLevel`,
//! `validationAction`, `bypassDocumentValidation`, and the 121 DocumentValidationFailure's
//! `errInfo`. Expected values come from jstests/core/doc_validation/*.js and the manual's
//! "Schema Validation" pages.

mod common;

use bson::{doc, Bson, Document};
use common::TestServer;
use mongodb::error::ErrorKind;
use mongodb::Database;

/// The students validator of the manual's "Specify JSON Schema Validation" page.
fn students_schema() -> Document {
    doc! {"$jsonSchema": {
        "bsonType": "object",
        "title": "Student Object Validation",
        "required": ["address", "major", "name", "year"],
        "properties": {
            "name": {"bsonType": "string", "description": "'name' must be a string and is required"},
            "year": {"bsonType": "int", "minimum": 2017, "maximum": 3017,
                     "description": "'year' must be an integer in [ 2017, 3017 ] and is required"},
            "gpa": {"bsonType": ["double"], "description": "'gpa' must be a double if the field exists"},
        },
    }}
}

async fn run(db: &Database, command: Document) -> mongodb::error::Result<Document> {
    db.run_command(command).await
}

/// The single write error of a failed write command reply.
fn write_error(reply: &Document) -> Document {
    let errors = reply.get_array("writeErrors").expect("writeErrors");
    assert_eq!(errors.len(), 1, "{reply}");
    errors[0].as_document().unwrap().clone()
}

/// `(code, errmsg, errInfo)` of a driver write error (insert_one and friends).
fn driver_write_error(
    result: mongodb::error::Result<impl std::fmt::Debug>,
) -> (i32, String, Document) {
    let error = result.expect_err("write fails");
    match *error.kind {
        ErrorKind::Write(mongodb::error::WriteFailure::WriteError(ref failure)) => (
            failure.code,
            failure.message.clone(),
            failure.details.clone().expect("errInfo"),
        ),
        ref other => panic!("expected a write error, got {other:?}"),
    }
}

#[tokio::test]
async fn manual_students_schema_refuses_a_bad_gpa_with_mongods_error() {
    let server = TestServer::start().await;
    let db = server.client().database("schema");
    run(
        &db,
        doc! {"create": "students", "validator": students_schema()},
    )
    .await
    .unwrap();
    let students = db.collection::<Document>("students");
    // The manual's failing insert: gpa is an integer.
    let (code, message, info) = driver_write_error(
        students
            .insert_one(doc! {"_id": 1, "name": "Alice", "year": 2019, "major": "History", "gpa": 3, "address": {"city": "NYC", "street": "33rd Street"}})
            .await,
    );
    assert_eq!(
        (code, message.as_str()),
        (121, "Document failed validation")
    );
    assert_eq!(
        info,
        doc! {
            "failingDocumentId": 1,
            "details": {
                "operatorName": "$jsonSchema",
                "title": "Student Object Validation",
                "schemaRulesNotSatisfied": [{
                    "operatorName": "properties",
                    "propertiesNotSatisfied": [{
                        "propertyName": "gpa",
                        "description": "'gpa' must be a double if the field exists",
                        "details": [{
                            "operatorName": "bsonType",
                            "specifiedAs": {"bsonType": ["double"]},
                            "reason": "type did not match",
                            "consideredValue": 3,
                            "consideredType": "int",
                        }],
                    }],
                }],
            },
        }
    );
    // The manual's passing insert.
    students
        .insert_one(doc! {"name": "Alice", "year": 2019, "major": "History", "gpa": 3.0, "address": {"city": "NYC", "street": "33rd Street"}})
        .await
        .unwrap();
    assert_eq!(students.count_documents(doc! {}).await.unwrap(), 1);
    server.stop().await;
}

/// jstests/core/doc_validation/doc_validation_options.js, step by step.
#[tokio::test]
async fn levels_and_actions_follow_doc_validation_options_js() {
    let server = TestServer::start().await;
    let db = server.client().database("schema");
    run(&db, doc! {"create": "t", "validator": {"a": 1}})
        .await
        .unwrap();
    let t = db.collection::<Document>("t");
    let (code, _, info) = driver_write_error(t.insert_one(doc! {"_id": 0, "a": 2}).await);
    assert_eq!(code, 121);
    assert_eq!(
        info,
        doc! {"failingDocumentId": 0, "details": {"operatorName": "$eq", "specifiedAs": {"a": 1}, "reason": "comparison failed", "consideredValue": 2}}
    );
    t.insert_one(doc! {"_id": 1, "a": 1}).await.unwrap();
    // Strict by default: the update fails.
    let (code, _, _) = driver_write_error(t.update_one(doc! {}, doc! {"$set": {"a": 2}}).await);
    assert_eq!(code, 121);
    assert_eq!(t.count_documents(doc! {"a": 1}).await.unwrap(), 1);
    // Warn: the update goes through.
    run(&db, doc! {"collMod": "t", "validationAction": "warn"})
        .await
        .unwrap();
    t.update_one(doc! {}, doc! {"$set": {"a": 2}})
        .await
        .unwrap();
    assert_eq!(t.count_documents(doc! {"a": 2}).await.unwrap(), 1);
    let info = listed_options(&db, "t").await;
    assert_eq!(
        info,
        doc! {"validator": {"a": 1}, "validationAction": "warn"}
    );
    // A validator that throws accepts writes in warn mode.
    run(
        &db,
        doc! {"collMod": "t", "validator": {"$expr": {"$divide": [10, 0]}}},
    )
    .await
    .unwrap();
    t.insert_one(doc! {"foo": "1"}).await.unwrap();
    t.delete_one(doc! {"foo": "1"}).await.unwrap();
    run(&db, doc! {"collMod": "t", "validator": {"a": 1}})
        .await
        .unwrap();
    // Back to error/strict: a bad document cannot be changed.
    run(
        &db,
        doc! {"collMod": "t", "validationAction": "error", "validationLevel": "strict"},
    )
    .await
    .unwrap();
    let (code, _, _) = driver_write_error(t.update_one(doc! {}, doc! {"$set": {"a": 3}}).await);
    assert_eq!(code, 121);
    assert_eq!(t.count_documents(doc! {"a": 2}).await.unwrap(), 1);
    // Moderate: bad -> bad is allowed.
    run(&db, doc! {"collMod": "t", "validationLevel": "moderate"})
        .await
        .unwrap();
    t.update_one(doc! {}, doc! {"$set": {"a": 3}})
        .await
        .unwrap();
    assert_eq!(t.count_documents(doc! {"a": 3}).await.unwrap(), 1);
    // Moderate still validates inserts and updates of valid documents.
    t.insert_one(doc! {"_id": 5, "a": 1}).await.unwrap();
    let (code, _, _) =
        driver_write_error(t.update_one(doc! {"_id": 5}, doc! {"$set": {"a": 4}}).await);
    assert_eq!(code, 121);
    // Create with warn: both inserts succeed.
    t.drop().await.unwrap();
    run(
        &db,
        doc! {"create": "t", "validator": {"a": 1}, "validationAction": "warn"},
    )
    .await
    .unwrap();
    t.insert_one(doc! {"a": 2}).await.unwrap();
    t.insert_one(doc! {"a": 1}).await.unwrap();
    assert_eq!(t.count_documents(doc! {}).await.unwrap(), 2);
    // Off: nothing is checked.
    run(
        &db,
        doc! {"collMod": "t", "validationLevel": "off", "validationAction": "error"},
    )
    .await
    .unwrap();
    t.insert_one(doc! {"a": 9}).await.unwrap();
    server.stop().await;
}

async fn listed_options(db: &Database, name: &str) -> Document {
    let reply = run(db, doc! {"listCollections": 1, "filter": {"name": name}})
        .await
        .unwrap();
    let batch = common::first_batch(&reply);
    batch[0].get_document("options").unwrap().clone()
}

/// The manual: validationLevel and validationAction are listed only when set.
#[tokio::test]
async fn list_collections_shows_what_was_set() {
    let server = TestServer::start().await;
    let db = server.client().database("schema");
    run(
        &db,
        doc! {"create": "students", "validator": students_schema()},
    )
    .await
    .unwrap();
    assert_eq!(
        listed_options(&db, "students").await,
        doc! {"validator": students_schema()}
    );
    run(
        &db,
        doc! {"collMod": "students", "validationLevel": "moderate"},
    )
    .await
    .unwrap();
    assert_eq!(
        listed_options(&db, "students").await,
        doc! {"validator": students_schema(), "validationLevel": "moderate"}
    );
    // An empty validator removes it.
    run(&db, doc! {"collMod": "students", "validator": {}})
        .await
        .unwrap();
    assert_eq!(
        listed_options(&db, "students").await,
        doc! {"validationLevel": "moderate"}
    );
    server.stop().await;
}

/// jstests/core/doc_validation/doc_validation_invalid_validators.js.
#[tokio::test]
async fn invalid_validators_are_refused() {
    let server = TestServer::start().await;
    let client = server.client();
    let db = client.database("schema");
    for validator in [
        Bson::Int32(7),
        Bson::String("assert".into()),
        Bson::Document(doc! {"$jsonSchema": {"invalid": 1}}),
        Bson::Document(doc! {"$text": "bob"}),
        Bson::Document(doc! {"$where": "this.a == this.b"}),
        Bson::Document(doc! {"$near": {"place": "holder"}}),
        Bson::Document(doc! {"$geoNear": {"place": "holder"}}),
        Bson::Document(doc! {"$nearSphere": {"place": "holder"}}),
        Bson::Document(doc! {"$expr": {"$eq": ["$a", "$$unbound"]}}),
    ] {
        let result = run(&db, doc! {"create": "c", "validator": validator.clone()}).await;
        assert!(result.is_err(), "create with {validator} must fail");
    }
    let (code, _, message) = common::command_error(
        run(
            &db,
            doc! {"create": "c", "validator": {"$where": "this.a == this.b"}},
        )
        .await,
    );
    assert_eq!(
        (code, message.as_str()),
        (2, "$where is not allowed in this context")
    );
    for name in ["admin", "config"] {
        let (code, ..) = common::command_error(
            run(
                &client.database(name),
                doc! {"create": "c", "validator": {"a": {"$exists": true}}},
            )
            .await,
        );
        assert_eq!(code, 72);
    }
    run(
        &db,
        doc! {"create": "c", "validator": {"a": {"$exists": true}}},
    )
    .await
    .unwrap();
    for validator in [
        doc! {"$text": {"$search": "bob"}},
        doc! {"$where": "this.a == this.b"},
        doc! {"$expr": {"$eq": ["$a", "$$unbound"]}},
        doc! {"$jsonSchema": {"invalid": 7}},
    ] {
        assert!(run(&db, doc! {"collMod": "c", "validator": validator})
            .await
            .is_err());
    }
    let (code, _, message) =
        common::command_error(run(&db, doc! {"collMod": "c", "validationLevel": "bogus"}).await);
    assert_eq!(
        (code, message.as_str()),
        (
            2,
            "Enumeration value 'bogus' for field 'collMod.validationLevel' is not a valid value."
        )
    );
    // The validator in force is unchanged.
    assert_eq!(
        listed_options(&db, "c").await,
        doc! {"validator": {"a": {"$exists": true}}}
    );
    server.stop().await;
}

/// jstests/core/doc_validation/bypass_doc_validation.js: every write path honours
/// `bypassDocumentValidation`, and checks without it.
#[tokio::test]
async fn every_write_path_validates_unless_bypassed() {
    let server = TestServer::start().await;
    let db = server.client().database("schema");
    run(
        &db,
        doc! {"create": "v", "validator": {"a": {"$exists": true}}},
    )
    .await
    .unwrap();
    run(
        &db,
        doc! {"insert": "src", "documents": [{"_id": 1, "b": 1}]},
    )
    .await
    .unwrap();
    let v = db.collection::<Document>("v");

    // insert
    let reply = run(&db, doc! {"insert": "v", "documents": [{"_id": 1}]})
        .await
        .unwrap();
    assert_eq!(write_error(&reply).get_i32("code"), Ok(121));
    run(
        &db,
        doc! {"insert": "v", "documents": [{"_id": 1}], "bypassDocumentValidation": true},
    )
    .await
    .unwrap();
    // update (operators, replacement, pipeline, upsert)
    for update in [
        doc! {"q": {"_id": 1}, "u": {"$set": {"b": 1}}},
        doc! {"q": {"_id": 1}, "u": {"b": 2}},
        doc! {"q": {"_id": 1}, "u": [{"$set": {"b": 3}}]},
        doc! {"q": {"_id": 9}, "u": {"$set": {"b": 1}}, "upsert": true},
    ] {
        let reply = run(&db, doc! {"update": "v", "updates": [update.clone()]})
            .await
            .unwrap();
        assert_eq!(write_error(&reply).get_i32("code"), Ok(121), "{update}");
        let reply = run(
            &db,
            doc! {"update": "v", "updates": [update.clone()], "bypassDocumentValidation": true},
        )
        .await
        .unwrap();
        assert!(!reply.contains_key("writeErrors"), "{update}: {reply}");
    }
    // findAndModify
    let (code, ..) = common::command_error(
        run(
            &db,
            doc! {"findAndModify": "v", "query": {"_id": 1}, "update": {"$set": {"c": 1}}},
        )
        .await,
    );
    assert_eq!(code, 121);
    run(&db, doc! {"findAndModify": "v", "query": {"_id": 1}, "update": {"$set": {"c": 1}}, "bypassDocumentValidation": true}).await.unwrap();
    // bulkWrite
    let bulk = |bypass: bool| {
        doc! {
            "bulkWrite": 1, "ops": [{"insert": 0, "document": {"_id": 20}}],
            "nsInfo": [{"ns": "schema.v"}], "bypassDocumentValidation": bypass,
        }
    };
    let reply = run(&server.client().database("admin"), bulk(false))
        .await
        .unwrap();
    assert_eq!(reply.get_i32("nErrors"), Ok(1), "{reply}");
    let reply = run(&server.client().database("admin"), bulk(true))
        .await
        .unwrap();
    assert_eq!(reply.get_i32("nErrors"), Ok(0), "{reply}");
    // $merge and $out into a validated collection
    let merge = |bypass: bool| {
        doc! {
            "aggregate": "src", "pipeline": [{"$merge": {"into": "v", "whenMatched": "replace"}}],
            "cursor": {}, "bypassDocumentValidation": bypass,
        }
    };
    let (code, ..) = common::command_error(run(&db, merge(false)).await);
    assert_eq!(code, 121);
    run(&db, merge(true)).await.unwrap();
    let out = |bypass: bool| {
        doc! {
            "aggregate": "src", "pipeline": [{"$out": "v"}], "cursor": {}, "bypassDocumentValidation": bypass,
        }
    };
    let (code, ..) = common::command_error(run(&db, out(false)).await);
    assert_eq!(code, 121);
    run(&db, out(true)).await.unwrap();
    assert_eq!(v.count_documents(doc! {}).await.unwrap(), 1);
    server.stop().await;
}

/// jstests/core/doc_validation/doc_validation_error.js, "Contacts": an `$or` validator lists
/// every clause it tried.
#[tokio::test]
async fn or_validator_lists_every_failed_clause() {
    let server = TestServer::start().await;
    let db = server.client().database("schema");
    let regex = bson::Regex {
        pattern: "@mongodb\\.com$".into(),
        options: String::new(),
    };
    run(
        &db,
        doc! {"create": "contacts", "validator": {"$or": [
            {"phone": {"$type": "string"}},
            {"email": {"$regex": regex.clone()}},
            {"status": {"$in": ["Unknown", "Incomplete"]}},
        ]}},
    )
    .await
    .unwrap();
    let reply = run(
        &db,
        doc! {"insert": "contacts", "documents": [{"_id": 1, "email": "info@mongodb.co"}]},
    )
    .await
    .unwrap();
    let error = write_error(&reply);
    assert_eq!(
        error
            .get_document("errInfo")
            .unwrap()
            .get_document("details")
            .unwrap(),
        &doc! {
            "operatorName": "$or",
            "clausesNotSatisfied": [
                {"index": 0, "details": {"operatorName": "$type", "specifiedAs": {"phone": {"$type": "string"}}, "reason": "field was missing"}},
                {"index": 1, "details": {"operatorName": "$regex", "specifiedAs": {"email": {"$regex": regex}}, "reason": "regular expression did not match", "consideredValue": "info@mongodb.co"}},
                {"index": 2, "details": {"operatorName": "$in", "specifiedAs": {"status": {"$in": ["Unknown", "Incomplete"]}}, "reason": "field was missing"}},
            ],
        }
    );
    server.stop().await;
}

/// doc_validation_options.js: in warn mode the failure is logged as line 20294 with the
/// `errInfo` an error would carry, visible in `getLog`.
#[tokio::test]
async fn warn_mode_logs_line_20294() {
    use tracing_subscriber::layer::SubscriberExt;
    // This binary's other tests may have set one already; the capture works either way only if
    // ours is the one installed, so tolerate a second attempt.
    let _ = tracing::subscriber::set_global_default(
        tracing_subscriber::registry().with(tideway::logbuf::CaptureLayer),
    );
    let server = TestServer::start().await;
    let db = server.client().database("schema");
    run(
        &db,
        doc! {"create": "w", "validator": {"a": 1}, "validationAction": "warn"},
    )
    .await
    .unwrap();
    db.collection::<Document>("w")
        .insert_one(doc! {"_id": 1, "a": 2})
        .await
        .unwrap();
    let log = run(
        &server.client().database("admin"),
        doc! {"getLog": "global"},
    )
    .await
    .unwrap();
    let line = log
        .get_array("log")
        .unwrap()
        .iter()
        .filter_map(Bson::as_str)
        // The log is the process's: other tests of this binary log warnings too.
        .find(|line| line.contains("Document would fail validation") && line.contains("schema.w"))
        .expect("the warning is logged");
    let parsed: serde_json::Value = serde_json::from_str(line).unwrap();
    assert_eq!(parsed["s"], "W");
    assert_eq!(parsed["attr"]["id"], 20294);
    assert_eq!(parsed["attr"]["namespace"], "schema.w");
    let info: serde_json::Value =
        serde_json::from_str(parsed["attr"]["errInfo"].as_str().unwrap()).unwrap();
    assert_eq!(
        info,
        serde_json::json!({"failingDocumentId": 1, "details": {"operatorName": "$eq", "specifiedAs": {"a": 1}, "reason": "comparison failed", "consideredValue": 2}})
    );
    server.stop().await;
}
