//! Conformance checks of session records and claims (`Storage::write_recorded`,
//! `session_record`, `session_statements`, `session_records`).

use std::sync::Arc;

use bson::{doc, Document};

use super::{cleanup, insert, ORDERED, UNORDERED};
use crate::{
    Namespace, RecordSession, SessionClaim, SessionRecord, Storage, StorageError, StorageResult,
    WriteOp, WriteOutcome,
};

/// A session key no earlier run on the same database used (session records outlive databases).
fn fresh_key() -> Vec<u8> {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_nanos());
    format!("conformance-session-{nanos}").into_bytes()
}

/// A record of `statements` (one per operation, kept for those that succeed) under
/// `txn_number`; `None` when none succeeded.
fn record(key: &[u8], txn_number: i64, statements: Vec<(i32, Document)>) -> RecordSession {
    let key = key.to_vec();
    Box::new(move |succeeded, _time| {
        let statements: Vec<(i32, Arc<Document>)> = statements
            .iter()
            .zip(succeeded)
            .filter(|(_, ok)| **ok)
            .map(|((stmt_id, reply), _)| (*stmt_id, Arc::new(reply.clone())))
            .collect();
        (!statements.is_empty()).then(|| SessionRecord {
            key: key.clone(),
            txn_number,
            statements,
            header: doc! {"last": txn_number},
        })
    })
}

/// One insert of `_id: id` recorded as statement `stmt_id` under `txn_number`, claiming it
/// when `claim`.
async fn recorded_insert(
    storage: &dyn Storage,
    ns: &Namespace,
    key: &[u8],
    txn_number: i64,
    claim: bool,
    (id, stmt_id): (i32, i32),
) -> StorageResult<Vec<StorageResult<WriteOutcome>>> {
    let claim = claim.then(|| SessionClaim {
        key: key.to_vec(),
        txn_number,
    });
    let ops: Vec<WriteOp> = vec![insert(doc! {"_id": id})];
    storage
        .write_recorded(
            ns,
            ops,
            ORDERED,
            claim,
            record(
                key,
                txn_number,
                vec![(stmt_id, doc! {"n": 1, "stmt": stmt_id})],
            ),
        )
        .await
}

async fn present(storage: &dyn Storage, ns: &Namespace, id: i32) -> bool {
    storage.get(ns, &id.into()).await.expect("get").is_some()
}

/// Records commit with their writes; one txnNumber's statements accumulate over commits and a
/// newer txnNumber replaces them; a claim of a used or older number fails the whole commit
/// (nothing applied, nothing recorded); of two commits claiming one number, one goes through.
pub async fn session_records(storage: &dyn Storage) {
    let db = "conf_sessions";
    let ns = Namespace::new(db, "c");
    let key = fresh_key();
    assert_eq!(storage.session_record(&key).await.unwrap(), None);

    // A first attempt: claims 5 and records the statements that succeeded (not the duplicate).
    let results = storage
        .write_recorded(
            &ns,
            vec![
                insert(doc! {"_id": 1}),
                insert(doc! {"_id": 1}),
                insert(doc! {"_id": 2}),
            ],
            UNORDERED,
            Some(SessionClaim {
                key: key.clone(),
                txn_number: 5,
            }),
            record(
                &key,
                5,
                vec![(0, doc! {"n": 1}), (1, doc! {"n": 1}), (2, doc! {"n": 1})],
            ),
        )
        .await
        .expect("claimed write");
    assert!(results[0].is_ok() && results[2].is_ok(), "{results:?}");
    assert!(
        matches!(results[1], Err(StorageError::DuplicateKey { .. })),
        "{results:?}"
    );
    assert_eq!(
        storage.session_record(&key).await.unwrap(),
        Some(doc! {"txnNumber": 5_i64, "last": 5_i64})
    );
    // A later commit of the same command, without a claim, adds its statement.
    recorded_insert(storage, &ns, &key, 5, false, (3, 7))
        .await
        .expect("unclaimed write");
    // And one of two statements whose replies differ.
    storage
        .write_recorded(
            &ns,
            vec![insert(doc! {"_id": 30}), insert(doc! {"_id": 31})],
            UNORDERED,
            None,
            record(
                &key,
                5,
                vec![(8, doc! {"n": 1, "first": true}), (9, doc! {"n": 1})],
            ),
        )
        .await
        .expect("unclaimed write");
    assert_eq!(
        storage.session_statements(&key, 5).await.unwrap(),
        [
            (0, doc! {"n": 1}),
            (2, doc! {"n": 1}),
            (7, doc! {"n": 1, "stmt": 7}),
            (8, doc! {"n": 1, "first": true}),
            (9, doc! {"n": 1})
        ]
    );

    // A retry claiming 5, or an older number: refused whole.
    for (txn_number, id) in [(5, 10), (4, 11)] {
        let refused = recorded_insert(storage, &ns, &key, txn_number, true, (id, 9)).await;
        assert!(
            matches!(refused, Err(StorageError::TxnNumberUsed)),
            "claim of {txn_number}: {refused:?}"
        );
        assert!(
            !present(storage, &ns, id).await,
            "refused claim {txn_number} wrote"
        );
    }
    assert_eq!(storage.session_statements(&key, 5).await.unwrap().len(), 5);

    // A newer number: claims, and its statements replace the older number's.
    recorded_insert(storage, &ns, &key, 6, true, (4, 0))
        .await
        .expect("newer claim");
    assert!(storage
        .session_statements(&key, 5)
        .await
        .unwrap()
        .is_empty());
    assert_eq!(
        storage.session_statements(&key, 6).await.unwrap(),
        [(0, doc! {"n": 1, "stmt": 0})]
    );
    assert!(storage
        .session_records()
        .await
        .unwrap()
        .contains(&(key.clone(), doc! {"txnNumber": 6_i64, "last": 6_i64})));

    // Two commits claiming 7 at once: exactly one is applied.
    let (first, second) = tokio::join!(
        recorded_insert(storage, &ns, &key, 7, true, (20, 0)),
        recorded_insert(storage, &ns, &key, 7, true, (21, 0)),
    );
    let applied = [&first, &second]
        .iter()
        .filter(|result| result.as_ref().is_ok_and(|results| results[0].is_ok()))
        .count();
    assert_eq!(applied, 1, "{first:?} {second:?}");
    assert!(
        [&first, &second]
            .iter()
            .any(|result| matches!(result, Err(StorageError::TxnNumberUsed))),
        "{first:?} {second:?}"
    );
    assert_eq!(
        u8::from(present(storage, &ns, 20).await) + u8::from(present(storage, &ns, 21).await),
        1
    );
    cleanup(storage, db).await;
}

/// Concurrent single-document writes, as many commands send them (an engine may commit them
/// together): each gets its own outcome. Claimed inserts of distinct sessions all go through
/// with their records; a claim of a used number fails alone (its document not written), an
/// insert of a taken `_id` fails alone, and so does one taking a (sparse) unique key another
/// holds.
pub async fn concurrent_single_writes(storage: &dyn Storage) {
    let db = "conf_concurrent";
    let ns = Namespace::new(db, "c");
    storage
        .write(&ns, vec![insert(doc! {"_id": 1001, "u": -1})], ORDERED)
        .await
        .expect("earlier insert");
    storage
        .create_indexes(
            &ns,
            vec![super::index_spec("u_1", &[("u", 1)], true, true, None)],
        )
        .await
        .expect("unique index");
    let base = fresh_key();
    let key = |session: i32| [base.as_slice(), format!("/{session}").as_bytes()].concat();
    // Session 0 has used number 9 already; `_id` 1000 and `u: -1` are taken.
    recorded_insert(storage, &ns, &key(0), 9, true, (1000, 0))
        .await
        .expect("earlier write");
    let ns = &ns;
    let claimed = (0..24).map(|session| {
        let key = key(session);
        async move {
            let number = if session == 0 { 9 } else { 1 };
            let id = if session == 5 { 1000 } else { session };
            (
                session,
                recorded_insert(storage, ns, &key, number, true, (id, 0)).await,
            )
        }
    });
    let plain = (0..8).map(|n| async move {
        let u = if n == 3 { -1 } else { n };
        let result = storage
            .write(ns, vec![insert(doc! {"_id": 100 + n, "u": u})], ORDERED)
            .await;
        (n, result)
    });
    let (claimed, plain) = futures::future::join(
        futures::future::join_all(claimed),
        futures::future::join_all(plain),
    )
    .await;
    for (session, result) in claimed {
        match session {
            0 => assert!(
                matches!(result, Err(StorageError::TxnNumberUsed)),
                "session 0: {result:?}"
            ),
            5 => {
                let results = result.expect("session 5's write");
                assert!(
                    matches!(results[..], [Err(StorageError::DuplicateKey { .. })]),
                    "session 5: {results:?}"
                );
            }
            _ => {
                let results = result.expect("claimed write");
                assert!(
                    matches!(results[..], [Ok(_)]),
                    "session {session}: {results:?}"
                );
                assert!(present(storage, ns, session).await, "session {session}");
                assert_eq!(
                    storage.session_record(&key(session)).await.unwrap(),
                    Some(doc! {"txnNumber": 1_i64, "last": 1_i64}),
                    "session {session}"
                );
            }
        }
    }
    assert!(
        !present(storage, ns, 0).await,
        "a refused claim writes nothing"
    );
    for (n, result) in plain {
        let results = result.expect("plain write");
        if n == 3 {
            assert!(
                matches!(results[..], [Err(StorageError::DuplicateKey { .. })]),
                "{results:?}"
            );
            assert!(!present(storage, ns, 103).await);
        } else {
            assert!(matches!(results[..], [Ok(_)]), "insert {n}: {results:?}");
            assert!(present(storage, ns, 100 + n).await);
        }
    }
    cleanup(storage, db).await;
}
