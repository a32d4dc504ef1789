//! Group commit for single-document inserts: the plain inserts of concurrent commands into one
//! collection, a retryable write's claim and session record with each, go to the database as
//! one statement and one commit instead of one each (mongod's journal and redb's writer group
//! commits the same way). A command waits for its insert's group; while a group's statement
//! runs, the inserts that arrive form the next one.
//!
//! Invariants:
//! - A group's statement inserts all its documents and stores all its claims, or nothing (one
//!   statement outside any transaction). When the database refuses it for one member's sake (an
//!   `_id` or unique key taken, a claim refused, a serialization failure), nothing of the group
//!   was written and every member of a group of several is written alone, where the refusal is
//!   its own; a group of one takes the refusal as its own at once.
//! - A group holds one session's claim at most and members of one cached collection version
//!   only; a member that does not fit waits for the next group.
//! - Groups run on tasks of their own, so a command that stops waiting (its client went away,
//!   `killOp`) never leaves the others without an answer; its insert leaves the queue with it
//!   unless a group already took it. At most [`RUNNERS`] groups of a collection run at once.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::oneshot;

use crate::collection::Collection;
use crate::conn::{Conn, Failure};
use crate::write::{blocks_for, insert_sql, revisions, ClaimShape, InsertColumns, Param};
use crate::Database;
use tideway_storage::indexkeys::DocumentKeys;
use tideway_storage::{StorageError, WriteMeta};

/// Groups of one collection whose statements may run at once.
const RUNNERS: usize = 2;

/// Inserts per group at most (a bound on the statement's size).
const MAX_GROUP: usize = 256;

/// One command's insert, as its group writes it.
pub(crate) struct GroupedInsert {
    pub id_key: Vec<u8>,
    pub body: Vec<u8>,
    pub meta: WriteMeta,
    pub keys: Vec<DocumentKeys>,
    pub claim: Option<GroupClaim>,
}

/// A retryable write's claim on `txn_number` with its session record of one statement.
pub(crate) struct GroupClaim {
    pub key: Vec<u8>,
    pub txn_number: i64,
    pub header: Vec<u8>,
    pub stmt_id: i32,
    pub reply: Vec<u8>,
}

/// How a grouped insert went.
#[derive(Debug)]
pub(crate) enum Grouped {
    /// Inserted (and its claim and record stored) with this revision.
    Inserted(u64),
    /// Nothing of the group was written, for a reason that may be this insert's own: write it
    /// alone.
    Alone,
    /// The group was this insert alone and the database refused it (`Unique`, `Serialization`
    /// or `Refused`): the refusal is its own, as if it had been written alone.
    Refused(Failure),
    /// The database failed (the outcome of a commit cut off is unknown, as for any write).
    Failed(StorageError),
}

struct Member {
    /// Tells this member from the others of its queue (a command that stops waiting removes
    /// its member by it).
    ticket: u64,
    collection: Arc<Collection>,
    insert: GroupedInsert,
    answer: oneshot::Sender<Grouped>,
}

impl Member {
    /// The session whose claim the insert carries, if any.
    fn session(&self) -> Option<&[u8]> {
        self.insert.claim.as_ref().map(|claim| claim.key.as_slice())
    }
}

#[derive(Default)]
struct Queue {
    waiting: Vec<Member>,
    runners: usize,
}

/// The insert queues of every collection with grouped inserts waiting or running.
#[derive(Default)]
pub(crate) struct InsertGroups {
    queues: Mutex<HashMap<i64, Queue>>,
    next_ticket: std::sync::atomic::AtomicU64,
}

/// Removes a member whose command stopped waiting before a group took it, so a cancelled
/// command writes nothing (one a group took is written or not as its statement goes).
struct Withdraw<'g> {
    groups: &'g InsertGroups,
    coll_id: i64,
    ticket: u64,
    answered: bool,
}

impl Drop for Withdraw<'_> {
    fn drop(&mut self) {
        if self.answered {
            return;
        }
        if let Some(queue) = self.groups.queues().get_mut(&self.coll_id) {
            queue.waiting.retain(|member| member.ticket != self.ticket);
        }
    }
}

impl InsertGroups {
    fn queues(&self) -> MutexGuard<'_, HashMap<i64, Queue>> {
        self.queues
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Takes the next group of `coll_id`'s queue, or ends a runner when nothing waits.
    fn next_group(&self, coll_id: i64) -> Option<Vec<Member>> {
        let mut queues = self.queues();
        let queue = queues.get_mut(&coll_id)?;
        if queue.waiting.is_empty() {
            queue.runners -= 1;
            if queue.runners == 0 {
                queues.remove(&coll_id);
            }
            return None;
        }
        let first = Arc::clone(&queue.waiting[0].collection);
        let mut group: Vec<Member> = Vec::new();
        let mut later = Vec::new();
        for member in std::mem::take(&mut queue.waiting) {
            let fits = group.len() < MAX_GROUP
                && Arc::ptr_eq(&member.collection, &first)
                && member
                    .session()
                    .is_none_or(|key| !group.iter().any(|taken| taken.session() == Some(key)));
            if fits {
                group.push(member);
            } else {
                later.push(member);
            }
        }
        queue.waiting = later;
        Some(group)
    }
}

impl Database {
    /// Writes `insert` into `collection` with the inserts of other commands waiting beside it
    /// (see the module docs).
    pub(crate) async fn insert_grouped(
        self: &Arc<Self>,
        collection: &Arc<Collection>,
        insert: GroupedInsert,
    ) -> Grouped {
        let (answer, answered) = oneshot::channel();
        let ticket = self
            .groups
            .next_ticket
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut withdraw = Withdraw {
            groups: &self.groups,
            coll_id: collection.id,
            ticket,
            answered: false,
        };
        let start_runner = {
            let mut queues = self.groups.queues();
            let queue = queues.entry(collection.id).or_default();
            queue.waiting.push(Member {
                ticket,
                collection: Arc::clone(collection),
                insert,
                answer,
            });
            let start = queue.runners < RUNNERS;
            if start {
                queue.runners += 1;
            }
            start
        };
        if start_runner {
            tokio::spawn(Arc::clone(self).run_groups(collection.id));
        }
        let outcome = answered.await.unwrap_or_else(|_| {
            Grouped::Failed(StorageError::Io(
                "a grouped insert ended without an answer".to_string(),
            ))
        });
        withdraw.answered = true;
        // The group's statement was this command's round trip.
        tideway_storage::command_scope::add_round_trips(1);
        outcome
    }

    /// Runs `coll_id`'s groups until its queue is empty.
    async fn run_groups(self: Arc<Self>, coll_id: i64) {
        while let Some(group) = self.groups.next_group(coll_id) {
            let outcome = self.write_group(&group).await;
            if outcome.is_ok() {
                self.counters
                    .insert_groups
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                self.counters
                    .grouped_inserts
                    .fetch_add(group.len() as u64, std::sync::atomic::Ordering::Relaxed);
            }
            let alone = group.len() == 1;
            for (index, member) in group.into_iter().enumerate() {
                let answer = match &outcome {
                    Ok(revs) => Grouped::Inserted(revs[index]),
                    Err(Failure::Storage(error)) => Grouped::Failed(error.clone()),
                    // The collection's catalog changed: every member is prepared again.
                    Err(Failure::StaleCatalog) => Grouped::Refused(Failure::StaleCatalog),
                    Err(Failure::Unique) if alone => Grouped::Refused(Failure::Unique),
                    Err(Failure::Serialization) if alone => {
                        Grouped::Refused(Failure::Serialization)
                    }
                    Err(Failure::Refused) if alone => Grouped::Refused(Failure::Refused),
                    Err(Failure::Unique | Failure::Serialization | Failure::Refused) => {
                        Grouped::Alone
                    }
                };
                // A member that stopped waiting gets nothing; its insert stands or not as the
                // statement went.
                let _ = member.answer.send(answer);
            }
        }
    }

    /// One statement for `group` (see [`insert_sql`]): each member's revision, in group order.
    async fn write_group(&self, group: &[Member]) -> Result<Vec<u64>, Failure> {
        let collection = &group[0].collection;
        let mut columns = InsertColumns::with_capacity(group.len());
        let mut claim_keys = Vec::new();
        let mut claim_numbers = Vec::new();
        let mut claim_headers = Vec::new();
        let mut claim_stmt_ids = Vec::new();
        let mut claim_replies = Vec::new();
        for Member { insert, .. } in group {
            columns.push(
                collection,
                &insert.id_key,
                &insert.body,
                &insert.meta,
                &insert.keys,
            );
            if let Some(claim) = &insert.claim {
                claim_keys.push(claim.key.as_slice());
                claim_numbers.push(claim.txn_number);
                claim_headers.push(claim.header.as_slice());
                claim_stmt_ids.push(claim.stmt_id);
                claim_replies.push(claim.reply.as_slice());
            }
        }
        let claims = claim_keys.len() as i64;
        let (mut params, with_entries, with_unique) = columns.params(collection);
        let shape = if claims > 0 {
            params.extend::<[Param; 6]>([
                &claim_keys,
                &claim_numbers,
                &claim_headers,
                &claim_stmt_ids,
                &claim_replies,
                &claims,
            ]);
            ClaimShape::Several
        } else {
            ClaimShape::None
        };
        params.push(&collection.version);
        let blocks = blocks_for(columns.len());
        let sql = insert_sql(with_entries, with_unique, shape, blocks);
        let conn = Conn::get(self).await.map_err(Failure::Storage)?;
        let rows = conn.query(sql, &params).await?;
        revisions(&rows, blocks, columns.len())
    }
}
