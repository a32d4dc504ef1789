//! Query diagnostics as mongod documents and behaves: `currentOp` and `$currentOp` list running
//! operations with their opid, namespace, command and running time (the asking op included);
//! `killOp` interrupts an operation, which then fails with 11601 Interrupted (an unknown opid is
//! still `ok: 1`); the profiler writes mongod-shaped entries to `<db>.system.profile` at level 2,
//! at level 1 only for operations at least `slowms` slow (or matching `filter`), keeps the
//! collection bounded, and never profiles its own writes. Long operations come from mongod's
//! test-only `sleep` command.

mod common;

use std::time::Duration;

use bson::{doc, Bson, Document};
use common::{command_error, TestServer};
use futures::TryStreamExt;
use mongodb::{Client, Database};

async fn server() -> TestServer {
    TestServer::start_with(tideway::Config {
        enable_test_commands: true,
        ..common::test_config()
    })
    .await
}

async fn run(db: &Database, command: Document) -> Document {
    db.run_command(command.clone())
        .await
        .unwrap_or_else(|error| panic!("{command} failed: {error}"))
}

/// The `inprog` entries of `{currentOp: 1, ...filter}`.
async fn current_op(client: &Client, filter: Document) -> Vec<Document> {
    let mut command = doc! {"currentOp": 1};
    command.extend(filter);
    let reply = run(&client.database("admin"), command).await;
    reply
        .get_array("inprog")
        .unwrap()
        .iter()
        .map(|op| op.as_document().unwrap().clone())
        .collect()
}

/// Waits until `currentOp` lists an op matching `filter`, and returns it.
async fn wait_for_op(client: &Client, filter: Document) -> Document {
    for _ in 0..500 {
        if let Some(op) = current_op(client, filter.clone()).await.pop() {
            return op;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("no running op matches {filter}");
}

/// The profile entries of `db`, oldest first.
async fn profile_entries(db: &Database, filter: Document) -> Vec<Document> {
    common::find_all(&db.collection("system.profile"), filter, Document::new()).await
}

#[tokio::test]
async fn current_op_shows_a_running_command_and_kill_op_interrupts_it() {
    let server = server().await;
    let sleeper = server.client();
    let watcher = server.client();
    let sleeping = tokio::spawn(async move {
        sleeper
            .database("admin")
            .run_command(doc! {"sleep": 1, "millis": 20_000, "lock": "none", "comment": "nap"})
            .await
    });
    let op = wait_for_op(&watcher, doc! {"command.sleep": {"$exists": true}}).await;
    assert_eq!(op.get_str("type").unwrap(), "op");
    assert!(op.get_bool("active").unwrap());
    assert_eq!(op.get_str("op").unwrap(), "command");
    assert_eq!(op.get_str("ns").unwrap(), "admin");
    let command = op.get_document("command").unwrap();
    assert_eq!(command.get_i32("millis").unwrap(), 20_000);
    assert_eq!(command.get_str("comment").unwrap(), "nap");
    assert_eq!(command.get_str("$db").unwrap(), "admin");
    let opid = op.get_i32("opid").expect("opid is an int");
    // Running time: whole seconds and microseconds, both longs.
    let secs = op.get_i64("secs_running").unwrap();
    let micros = op.get_i64("microsecs_running").unwrap();
    assert_eq!(secs, micros / 1_000_000);
    let connection_id = op.get_i32("connectionId").unwrap();
    assert_eq!(op.get_str("desc").unwrap(), format!("conn{connection_id}"));
    assert!(op.get_str("client").unwrap().starts_with("127.0.0.1:"));
    assert!(op.get_str("host").unwrap().contains(':'));
    assert!(!op.get_str("currentOpTime").unwrap().is_empty());
    assert_eq!(op.get_i32("numYields").unwrap(), 0);
    assert_eq!(op.get_document("locks").unwrap(), &doc! {});
    assert!(!op.get_bool("waitingForLock").unwrap());

    // Seen again later, it has been running longer.
    tokio::time::sleep(Duration::from_millis(20)).await;
    let again = wait_for_op(&watcher, doc! {"opid": opid}).await;
    assert!(again.get_i64("microsecs_running").unwrap() > micros);

    let reply = run(&watcher.database("admin"), doc! {"killOp": 1, "op": opid}).await;
    assert_eq!(reply.get_str("info").unwrap(), "attempting to kill op");
    assert_eq!(reply.get_f64("ok").unwrap(), 1.0);
    let result = tokio::time::timeout(Duration::from_secs(5), sleeping)
        .await
        .expect("the killed command returns at once")
        .unwrap();
    let (code, name, message) = command_error(result);
    assert_eq!(
        (code, name.as_str(), message.as_str()),
        (11601, "Interrupted", "operation was interrupted")
    );
    // Gone from currentOp once it ended.
    assert!(current_op(&watcher, doc! {"opid": opid}).await.is_empty());
    server.stop().await;
}

#[tokio::test]
async fn current_op_lists_itself() {
    let server = server().await;
    let client = server.client();
    let ops = current_op(&client, doc! {"command.currentOp": {"$exists": true}}).await;
    assert_eq!(ops.len(), 1, "{ops:?}");
    assert_eq!(ops[0].get_str("op").unwrap(), "command");
    assert_eq!(ops[0].get_str("ns").unwrap(), "admin.$cmd.aggregate");
    // A filter that matches nothing leaves `inprog` empty.
    assert!(current_op(&client, doc! {"ns": "nowhere.at.all"})
        .await
        .is_empty());
    server.stop().await;
}

#[tokio::test]
async fn a_long_sorted_find_can_be_killed() {
    let server = server().await;
    let client = server.client();
    let db = client.database("test");
    let mut documents = 20_000;
    for attempt in 0..4 {
        let collection = format!("big{attempt}");
        let batch: Vec<Document> = (0..documents)
            .map(|i| doc! {"_id": i, "key": (i * 7919) % 10007, "pad": "x".repeat(50)})
            .collect();
        db.collection::<Document>(&collection)
            .insert_many(batch)
            .await
            .unwrap();
        let finder = server.client();
        let coll = collection.clone();
        let finding = tokio::spawn(async move {
            finder
                .database("test")
                .run_command(doc! {"find": coll, "sort": {"key": -1, "pad": 1}, "batchSize": 1})
                .await
        });
        let ns = format!("test.{collection}");
        let mut killed = false;
        while !finding.is_finished() {
            if let Some(op) = current_op(&client, doc! {"op": "query", "ns": &ns})
                .await
                .pop()
            {
                assert_eq!(
                    op.get_document("command").unwrap().get_str("find").unwrap(),
                    collection
                );
                let opid = op.get_i32("opid").unwrap();
                run(&client.database("admin"), doc! {"killOp": 1, "op": opid}).await;
                killed = true;
                break;
            }
        }
        match finding.await.unwrap() {
            Err(error) => {
                assert!(killed);
                let (code, _, message) = command_error::<Document>(Err(error));
                assert_eq!(
                    (code, message.as_str()),
                    (11601, "operation was interrupted")
                );
                server.stop().await;
                return;
            }
            // The find finished before the kill reached it: try a bigger one.
            Ok(_) => documents *= 2,
        }
    }
    panic!("the find always finished before killOp");
}

#[tokio::test]
async fn kill_op_of_an_unknown_op_is_ok_and_its_arguments_are_checked() {
    let server = server().await;
    let client = server.client();
    let admin = client.database("admin");
    let reply = run(&admin, doc! {"killOp": 1, "op": 123_456_789}).await;
    assert_eq!(reply.get_str("info").unwrap(), "attempting to kill op");
    let (code, name, message) = command_error(admin.run_command(doc! {"killOp": 1}).await);
    assert_eq!(
        (code, name.as_str(), message.as_str()),
        (4, "NoSuchKey", "Missing expected field \"op\"")
    );
    let (code, _, message) = command_error(admin.run_command(doc! {"killOp": 1, "op": "x"}).await);
    assert_eq!(
        (code, message.as_str()),
        (
            14,
            "Expected field \"op\" to have numeric type, but found string"
        )
    );
    for command in ["killOp", "currentOp"] {
        let (code, _, message) = command_error(
            client
                .database("test")
                .run_command(doc! {command: 1, "op": 1})
                .await,
        );
        assert_eq!(
            (code, message),
            (
                13,
                format!("{command} may only be run against the admin database.")
            )
        );
    }
    server.stop().await;
}

#[tokio::test]
async fn current_op_stage_reports_ops_and_idle_connections() {
    let server = server().await;
    let client = server.client();
    let admin = client.database("admin");
    // Another connection, idle.
    let idle = server.client();
    run(&idle.database("admin"), doc! {"ping": 1}).await;

    let ops: Vec<Document> = admin
        .aggregate(vec![
            doc! {"$currentOp": {"allUsers": true}},
            doc! {"$match": {"command.aggregate": 1}},
        ])
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap();
    assert_eq!(ops.len(), 1, "{ops:?}");
    assert_eq!(ops[0].get_str("ns").unwrap(), "admin.$cmd.aggregate");
    assert!(ops[0].get_bool("active").unwrap());

    let all: Vec<Document> = admin
        .aggregate(vec![doc! {"$currentOp": {"idleConnections": true}}])
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap();
    assert!(
        all.iter()
            .any(|op| op.get_bool("active") == Ok(false) && !op.contains_key("opid")),
        "{all:?}"
    );
    let active = all
        .iter()
        .filter(|op| op.get_bool("active") == Ok(true))
        .count();
    assert!(active >= 1);

    let failure = |pipeline: Vec<Document>, db: &'static str| {
        let client = client.clone();
        async move {
            command_error(
                client
                    .database(db)
                    .run_command(doc! {"aggregate": 1, "pipeline": pipeline, "cursor": {}})
                    .await,
            )
        }
    };
    let (code, _, message) = failure(vec![doc! {"$currentOp": {}}], "test").await;
    assert_eq!(
        (code, message.as_str()),
        (
            73,
            "$currentOp must be run against the 'admin' database with {aggregate: 1}"
        )
    );
    let (code, _, message) =
        failure(vec![doc! {"$match": {}}, doc! {"$currentOp": {}}], "admin").await;
    assert_eq!(
        (code, message.as_str()),
        (
            40602,
            "$currentOp is only valid as the first stage in a pipeline"
        )
    );
    let (code, _, message) = failure(vec![doc! {"$currentOp": {"bogus": true}}], "admin").await;
    assert_eq!(
        (code, message.as_str()),
        (9, "Unrecognized option 'bogus' in $currentOp stage.")
    );
    let (code, _, _) = failure(vec![doc! {"$currentOp": {"allUsers": 1}}], "admin").await;
    assert_eq!(code, 14);
    let (code, _, _) = failure(vec![doc! {"$currentOp": {"idleCursors": true}}], "admin").await;
    assert_eq!(code, 238);
    server.stop().await;
}

#[tokio::test]
async fn profile_reports_and_changes_settings_like_mongod() {
    let server = server().await;
    let client = server.client();
    let db = client.database("test");
    let reply = run(&db, doc! {"profile": -1}).await;
    assert_eq!(reply.get_i32("was").unwrap(), 0);
    assert_eq!(reply.get_i32("slowms").unwrap(), 100);
    assert_eq!(reply.get_f64("sampleRate").unwrap(), 1.0);
    assert!(!reply.contains_key("filter"));

    let reply = run(&db, doc! {"profile": 1, "slowms": 20, "sampleRate": 0.5}).await;
    // The reply holds the settings before the change.
    assert_eq!(reply.get_i32("was").unwrap(), 0);
    assert_eq!(reply.get_i32("slowms").unwrap(), 100);
    let reply = run(&db, doc! {"profile": -1}).await;
    assert_eq!(reply.get_i32("was").unwrap(), 1);
    assert_eq!(reply.get_i32("slowms").unwrap(), 20);
    assert_eq!(reply.get_f64("sampleRate").unwrap(), 0.5);
    // slowms and sampleRate are server-wide; the level is the database's.
    let other = run(&client.database("other"), doc! {"profile": -1}).await;
    assert_eq!(other.get_i32("was").unwrap(), 0);
    assert_eq!(other.get_i32("slowms").unwrap(), 20);

    // mongod reports the filter in its normalised form, which for one `{field: {$op: value}}`
    // clause is the filter as given.
    let filter = doc! {"op": {"$eq": "query"}};
    run(&db, doc! {"profile": 1, "filter": filter.clone()}).await;
    let reply = run(&db, doc! {"profile": -1}).await;
    assert_eq!(reply.get_document("filter").unwrap(), &filter);
    assert!(reply
        .get_str("note")
        .unwrap()
        .starts_with("When a filter expression is set"));
    run(&db, doc! {"profile": 0, "filter": "unset"}).await;
    assert!(!run(&db, doc! {"profile": -1}).await.contains_key("filter"));

    let (code, _, message) =
        command_error(db.run_command(doc! {"profile": 1, "sampleRate": 1.5}).await);
    assert_eq!(
        (code, message.as_str()),
        (2, "'sampleRate' must be between 0.0 and 1.0 inclusive")
    );
    let (code, _, message) = command_error(
        db.run_command(doc! {"profile": 1, "filter": {"nosuch": 1}})
            .await,
    );
    assert_eq!(
        (code, message.as_str()),
        (
            4910200,
            "No such field (or fields) available for profile filter: nosuch"
        )
    );
    let (code, _, message) = command_error(db.run_command(doc! {"profile": 1, "filter": 5}).await);
    assert_eq!(
        (code, message.as_str()),
        (2, "Expected an object, or the string 'unset'.")
    );
    // Nothing was changed by the failed commands.
    assert_eq!(
        run(&db, doc! {"profile": -1}).await.get_i32("was").unwrap(),
        0
    );
    server.stop().await;
}

#[tokio::test]
async fn level_zero_profiles_nothing_and_level_two_profiles_every_operation() {
    let server = server().await;
    let client = server.client();
    let db = client.database("test");
    let c = db.collection::<Document>("c");
    c.insert_many(vec![
        doc! {"_id": 1, "a": 1},
        doc! {"_id": 2, "a": 1},
        doc! {"_id": 3, "a": 2},
    ])
    .await
    .unwrap();
    c.find(doc! {})
        .await
        .unwrap()
        .try_collect::<Vec<_>>()
        .await
        .unwrap();
    assert!(profile_entries(&db, doc! {}).await.is_empty());

    run(&db, doc! {"profile": 2}).await;
    let found: Vec<Document> = c
        .find(doc! {"a": 1})
        .comment("counted")
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap();
    assert_eq!(found.len(), 2);
    c.insert_many(vec![doc! {"_id": 4}, doc! {"_id": 5}])
        .await
        .unwrap();
    c.update_many(doc! {"a": 1}, doc! {"$set": {"b": 1}})
        .await
        .unwrap();
    c.delete_one(doc! {"_id": 5}).await.unwrap();
    run(&db, doc! {"profile": 0}).await;

    let entries = profile_entries(&db, doc! {}).await;
    // The command that turned profiling on ran before it was on.
    assert!(!entries.iter().any(|entry| {
        entry.get_document("command").unwrap().get("profile") == Some(&Bson::Int32(2))
    }));

    let find = entries
        .iter()
        .find(|entry| entry.get_str("op") == Ok("query"))
        .expect("the find is profiled");
    assert_eq!(find.get_str("ns").unwrap(), "test.c");
    let command = find.get_document("command").unwrap();
    assert_eq!(command.get_str("find").unwrap(), "c");
    assert_eq!(command.get_document("filter").unwrap(), &doc! {"a": 1});
    assert_eq!(command.get_str("comment").unwrap(), "counted");
    assert_eq!(command.get_str("$db").unwrap(), "test");
    // nreturned is the number of documents returned; the cursor is exhausted, so no cursorid.
    assert_eq!(find.get_i32("nreturned").unwrap(), 2);
    assert!(!find.contains_key("cursorid"));
    assert_eq!(find.get_i32("numYield").unwrap(), 0);
    assert_eq!(find.get_str("protocol").unwrap(), "op_msg");
    assert!(find.get_i32("millis").unwrap() >= 0);
    assert!(find.get_i32("responseLength").unwrap() > 0);
    assert!(matches!(find.get("ts"), Some(Bson::DateTime(_))));
    assert_eq!(find.get_str("client").unwrap(), "127.0.0.1");
    assert_eq!(find.get_array("allUsers").unwrap(), &Vec::<Bson>::new());
    assert_eq!(find.get_str("user").unwrap(), "");
    assert_eq!(find.get_document("locks").unwrap(), &doc! {});
    assert!(!find.contains_key("ok"));

    let insert = entries
        .iter()
        .find(|entry| entry.get_str("op") == Ok("insert"))
        .unwrap();
    assert_eq!(insert.get_str("ns").unwrap(), "test.c");
    assert_eq!(insert.get_i32("ninserted").unwrap(), 2);
    let update = entries
        .iter()
        .find(|entry| entry.get_str("op") == Ok("update"))
        .unwrap();
    assert_eq!(update.get_i32("nMatched").unwrap(), 2);
    assert_eq!(update.get_i32("nModified").unwrap(), 2);
    let remove = entries
        .iter()
        .find(|entry| entry.get_str("op") == Ok("remove"))
        .unwrap();
    assert_eq!(remove.get_i32("ndeleted").unwrap(), 1);
    server.stop().await;
}

#[tokio::test]
async fn get_more_and_failed_commands_are_profiled_like_mongod() {
    let server = server().await;
    let client = server.client();
    let db = client.database("test");
    let c = db.collection::<Document>("c");
    c.insert_many((0..5).map(|i| doc! {"_id": i}).collect::<Vec<_>>())
        .await
        .unwrap();
    run(&db, doc! {"profile": 2}).await;
    let first = run(&db, doc! {"find": "c", "batchSize": 2}).await;
    let cursor_id = first.get_document("cursor").unwrap().get_i64("id").unwrap();
    run(&db, doc! {"getMore": cursor_id, "collection": "c"}).await;
    let _ = db
        .run_command(doc! {"find": "c", "filter": {"$bogus": 1}})
        .await;
    run(&db, doc! {"profile": 0}).await;

    let find = profile_entries(&db, doc! {"op": "query", "command.batchSize": 2}).await;
    assert_eq!(find.len(), 1);
    assert_eq!(find[0].get_i32("nreturned").unwrap(), 2);
    assert_eq!(find[0].get("cursorid"), Some(&Bson::Int64(cursor_id)));
    let get_more = profile_entries(&db, doc! {"op": "getmore"}).await;
    assert_eq!(get_more.len(), 1);
    assert_eq!(get_more[0].get_str("ns").unwrap(), "test.c");
    assert_eq!(get_more[0].get_i32("nreturned").unwrap(), 3);
    assert!(get_more[0].get_bool("cursorExhausted").unwrap());
    assert_eq!(get_more[0].get("cursorid"), Some(&Bson::Int64(cursor_id)));
    // The getMore's entry names the command that opened the cursor.
    let originating = get_more[0].get_document("originatingCommand").unwrap();
    assert_eq!(originating.get_str("find").unwrap(), "c");
    assert_eq!(originating.get_i32("batchSize").unwrap(), 2);

    let failed = profile_entries(&db, doc! {"ok": 0.0}).await;
    assert_eq!(failed.len(), 1, "{failed:?}");
    assert_eq!(failed[0].get_i32("errCode").unwrap(), 2);
    assert_eq!(failed[0].get_str("errName").unwrap(), "BadValue");
    assert!(failed[0].get_str("errMsg").unwrap().contains("$bogus"));
    server.stop().await;
}

#[tokio::test]
async fn level_one_profiles_slow_operations_or_those_matching_the_filter() {
    let server = server().await;
    let client = server.client();
    let admin = client.database("admin");
    run(&admin, doc! {"profile": 1, "slowms": 150}).await;
    run(&admin, doc! {"sleep": 1, "millis": 1, "lock": "none"}).await;
    run(&admin, doc! {"sleep": 1, "millis": 300, "lock": "none"}).await;
    run(&admin, doc! {"profile": 0}).await;
    let sleeps = profile_entries(&admin, doc! {"command.sleep": {"$exists": true}}).await;
    assert_eq!(sleeps.len(), 1, "{sleeps:?}");
    assert_eq!(
        sleeps[0]
            .get_document("command")
            .unwrap()
            .get_i32("millis")
            .unwrap(),
        300
    );
    assert!(sleeps[0].get_i32("millis").unwrap() >= 300);

    // sampleRate 0: no slow op is sampled.
    run(&admin, doc! {"profile": 1, "slowms": 0, "sampleRate": 0.0}).await;
    run(&admin, doc! {"sleep": 1, "millis": 5, "lock": "none"}).await;
    run(&admin, doc! {"profile": 0, "sampleRate": 1.0}).await;
    assert_eq!(
        profile_entries(&admin, doc! {"command.sleep": {"$exists": true}})
            .await
            .len(),
        1
    );

    // A filter replaces slowms and sampleRate: fast queries are profiled, fast inserts are not.
    let db = client.database("test");
    run(
        &db,
        doc! {"profile": 1, "slowms": 100_000, "filter": {"op": "query"}},
    )
    .await;
    let c = db.collection::<Document>("c");
    c.insert_one(doc! {"_id": 1}).await.unwrap();
    c.find_one(doc! {"_id": 1}).await.unwrap();
    run(&db, doc! {"profile": 0}).await;
    let entries = profile_entries(&db, doc! {}).await;
    let ops: Vec<&str> = entries
        .iter()
        .map(|entry| entry.get_str("op").unwrap())
        .collect();
    assert_eq!(ops, vec!["query"]);
    server.stop().await;
}

#[tokio::test]
async fn the_profile_collection_stays_bounded_and_reading_it_does_not_recurse() {
    let server = server().await;
    let client = server.client();
    let db = client.database("test");
    run(&db, doc! {"profile": 2}).await;
    // About 300 entries of 10 KiB: three times mongod's 1 MiB.
    let pad = "p".repeat(10 * 1024);
    for i in 0..300 {
        db.run_command(doc! {"find": "c", "filter": {"i": i, "pad": &pad}})
            .await
            .unwrap();
    }
    run(&db, doc! {"profile": 0}).await;
    let entries = profile_entries(&db, doc! {}).await;
    let bytes: usize = entries
        .iter()
        .map(|entry| bson::to_vec(entry).unwrap().len())
        .sum();
    assert!(bytes <= 1024 * 1024, "{bytes} bytes kept");
    assert!(
        entries.len() < 300 && entries.len() > 50,
        "{} kept",
        entries.len()
    );
    // The newest are kept, in insertion order.
    let kept: Vec<i32> = entries
        .iter()
        .filter_map(|entry| {
            entry
                .get_document("command")
                .ok()?
                .get_document("filter")
                .ok()?
                .get_i32("i")
                .ok()
        })
        .collect();
    assert_eq!(kept.last(), Some(&299));
    assert!(
        kept.windows(2).all(|pair| pair[0] + 1 == pair[1]),
        "{kept:?}"
    );

    // Reading system.profile at level 2 adds one entry per read, nothing more.
    run(&db, doc! {"drop": "system.profile"}).await;
    run(&db, doc! {"profile": 2}).await;
    for _ in 0..3 {
        profile_entries(&db, doc! {"op": "query"}).await;
    }
    run(&db, doc! {"profile": 0}).await;
    let reads = profile_entries(&db, doc! {"ns": "test.system.profile"}).await;
    assert_eq!(reads.len(), 3);
    server.stop().await;
}

#[tokio::test]
async fn show_profile_finds_the_newest_entries_first() {
    let server = server().await;
    let client = server.client();
    let db = client.database("test");
    run(&db, doc! {"profile": 2}).await;
    for i in 0..8 {
        run(&db, doc! {"count": "c", "query": {"i": i}}).await;
    }
    run(&db, doc! {"profile": 0}).await;
    // What mongosh's `show profile` runs (a count, then the newest entries in reverse natural
    // order), on this test's entries.
    let profile = db.collection::<Document>("system.profile");
    let counts = doc! {"command.count": "c"};
    assert_eq!(profile.count_documents(counts.clone()).await.unwrap(), 8);
    let newest: Vec<Document> = profile
        .find(counts)
        .sort(doc! {"$natural": -1})
        .limit(5)
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap();
    let order: Vec<i32> = newest
        .iter()
        .map(|entry| {
            let command = entry.get_document("command").unwrap();
            command.get_document("query").unwrap().get_i32("i").unwrap()
        })
        .collect();
    assert_eq!(order, vec![7, 6, 5, 4, 3]);
    // And in natural order, the oldest first.
    let oldest = profile
        .find_one(doc! {"command.count": "c"})
        .sort(doc! {"$natural": 1})
        .await
        .unwrap()
        .unwrap();
    let first = oldest
        .get_document("command")
        .unwrap()
        .get_document("query")
        .unwrap();
    assert_eq!(first.get_i32("i").unwrap(), 0);
    server.stop().await;
}

#[tokio::test]
async fn system_profile_cannot_be_dropped_while_profiling_and_drop_database_resets_the_level() {
    let server = server().await;
    let client = server.client();
    let db = client.database("test");
    run(&db, doc! {"profile": 2}).await;
    let (code, name, message) =
        command_error(db.run_command(doc! {"drop": "system.profile"}).await);
    assert_eq!(
        (code, name.as_str(), message.as_str()),
        (
            20,
            "IllegalOperation",
            "turn off profiling before dropping system.profile collection"
        )
    );
    run(&db, doc! {"dropDatabase": 1}).await;
    assert_eq!(
        run(&db, doc! {"profile": -1}).await.get_i32("was").unwrap(),
        0
    );
    run(&db, doc! {"profile": 1}).await;
    run(&db, doc! {"profile": 0}).await;
    run(&db, doc! {"drop": "system.profile"}).await;
    server.stop().await;
}

#[tokio::test]
async fn entries_carry_the_application_name() {
    let server = server().await;
    let mut options = server.options();
    options.app_name = Some("odm-tests".into());
    let client = Client::with_options(options).unwrap();
    let db = client.database("test");
    run(&db, doc! {"profile": 2}).await;
    run(&db, doc! {"count": "c"}).await;
    run(&db, doc! {"profile": 0}).await;
    let entries = profile_entries(&db, doc! {"command.count": "c"}).await;
    assert_eq!(entries[0].get_str("appName").unwrap(), "odm-tests");
    let ops = current_op(&client, doc! {"command.currentOp": 1}).await;
    assert_eq!(ops[0].get_str("appName").unwrap(), "odm-tests");
    server.stop().await;
}

#[tokio::test]
async fn max_time_ms_still_interrupts_a_sleep() {
    let server = server().await;
    let client = server.client();
    let (code, _, message) = command_error(
        client
            .database("admin")
            .run_command(doc! {"sleep": 1, "millis": 5_000, "lock": "none", "maxTimeMS": 50})
            .await,
    );
    assert_eq!(
        (code, message.as_str()),
        (50, "operation exceeded time limit")
    );
    server.stop().await;
}

#[tokio::test]
async fn big_commands_are_profiled_truncated_with_their_comment() {
    let server = server().await;
    let client = server.client();
    let db = client.database("test");
    run(&db, doc! {"profile": 2}).await;
    let documents: Vec<Document> = (0..2000)
        .map(|i| doc! {"_id": i, "pad": "p".repeat(100)})
        .collect();
    db.collection::<Document>("c")
        .insert_many(documents)
        .comment(Bson::String("bulk".into()))
        .await
        .unwrap();
    run(&db, doc! {"profile": 0}).await;
    let entries = profile_entries(&db, doc! {"op": "insert"}).await;
    assert_eq!(entries.len(), 1);
    assert_eq!(entries[0].get_i32("ninserted").unwrap(), 2000);
    // Over 50 KB, mongod keeps `{$truncated: "<the command as text, cut>...", comment}`.
    let command = entries[0].get_document("command").unwrap();
    let text = command.get_str("$truncated").unwrap();
    assert!(
        text.len() <= 50 * 1024 && text.ends_with("..."),
        "{}",
        text.len()
    );
    assert!(text.starts_with("{insert: \"c\""), "{}", &text[..40]);
    assert_eq!(command.get_str("comment").unwrap(), "bulk");
    server.stop().await;
}

#[tokio::test]
async fn the_profile_option_sets_every_databases_default_level() {
    let server = TestServer::start_with(tideway::Config {
        profile: 2,
        ..common::test_config()
    })
    .await;
    let client = server.client();
    let db = client.database("fresh");
    assert_eq!(
        run(&db, doc! {"profile": -1}).await.get_i32("was").unwrap(),
        2
    );
    run(&db, doc! {"count": "c"}).await;
    let entries = profile_entries(&db, doc! {"command.count": "c"}).await;
    assert_eq!(entries.len(), 1);
    let options = run(&client.database("admin"), doc! {"getCmdLineOpts": 1}).await;
    let profiling = options
        .get_document("parsed")
        .unwrap()
        .get_document("operationProfiling")
        .unwrap();
    assert_eq!(profiling.get_str("mode").unwrap(), "all");
    // A database's own setting wins over the default.
    run(&db, doc! {"profile": 0}).await;
    run(&db, doc! {"count": "c"}).await;
    assert_eq!(
        profile_entries(&db, doc! {"command.count": "c"})
            .await
            .len(),
        1
    );
    server.stop().await;
}

#[tokio::test]
async fn find_and_modify_entries_count_what_it_changed() {
    let server = server().await;
    let client = server.client();
    let db = client.database("test");
    let c = db.collection::<Document>("c");
    c.insert_many(vec![doc! {"_id": 1, "a": 1}, doc! {"_id": 2, "a": 2}])
        .await
        .unwrap();
    run(&db, doc! {"profile": 2}).await;
    c.find_one_and_update(doc! {"_id": 1}, doc! {"$inc": {"a": 1}})
        .await
        .unwrap();
    c.find_one_and_update(doc! {"_id": 9}, doc! {"$set": {"a": 9}})
        .upsert(true)
        .await
        .unwrap();
    c.find_one_and_delete(doc! {"_id": 2}).await.unwrap();
    run(&db, doc! {"profile": 0}).await;
    let entries = profile_entries(&db, doc! {"command.findAndModify": "c"}).await;
    assert_eq!(entries.len(), 3);
    let counts = |entry: &Document, field: &str| entry.get_i32(field).ok();
    assert_eq!(entries[0].get_str("op").unwrap(), "command");
    assert_eq!(counts(&entries[0], "nMatched"), Some(1));
    assert_eq!(counts(&entries[0], "nModified"), Some(1));
    assert_eq!(counts(&entries[1], "nMatched"), Some(0));
    assert_eq!(counts(&entries[1], "nModified"), Some(0));
    assert_eq!(counts(&entries[1], "nUpserted"), Some(1));
    assert_eq!(counts(&entries[2], "ndeleted"), Some(1));
    server.stop().await;
}
