//! `$changeStream` as a cursor: `aggregate` opens a stream ([`crate::changes`]) and serves its
//! first batch; the stream lives in a tailable, awaitData cursor whose `getMore`s wait for
//! new events.

use bson::Document;

use crate::changes::stream::{reply, DEFAULT_AWAIT_MS, STANDALONE_WITHOUT_OPLOG};
use crate::changes::{ChangeStream, Reader};
use crate::command::CommandContext;
use crate::commands::args::optional_i64;
use crate::cursor::{Cursor, CursorSource, DEFAULT_FIRST_BATCH};
use tideway_base::error::{CommandError, CommandResult};
use tideway_storage::Namespace;
use tideway_wire::Reply;

fn reader<'a>(ctx: &CommandContext<'a>) -> Reader<'a> {
    Reader {
        storage: ctx.state.storage.as_ref(),
        gates: &ctx.state.policy_gates,
        clock: ctx.state.clock.as_ref(),
        without_oplog: if ctx.state.repl.as_ref().is_some_and(|repl| repl.router) {
            ROUTER_WITHOUT_OPLOG
        } else {
            STANDALONE_WITHOUT_OPLOG
        },
    }
}

/// Why a router over PostgreSQL has no change streams.
const ROUTER_WITHOUT_OPLOG: &str = "The $changeStream stage is not supported by tideway over PostgreSQL yet: change streams need one global order of committed writes, which this storage mode does not keep";

/// `aggregate` whose first stage is `$changeStream`; `collection` is `None` for `aggregate: 1`.
pub async fn open(
    ctx: &CommandContext<'_>,
    body: &Document,
    collection: Option<Namespace>,
    stages: &[Document],
) -> CommandResult<Reply> {
    let reader = reader(ctx);
    let mut stream = ChangeStream::open(&reader, ctx.db, collection, stages).await?;
    let batch_size = body
        .get_document("cursor")
        .ok()
        .and_then(|cursor| cursor.get("batchSize"))
        .and_then(tideway_base::bsonutil::as_f64)
        .map_or(DEFAULT_FIRST_BATCH, |size| size.max(0.0) as u64);
    let (batch, token) = stream.next_batch(&reader, batch_size).await?;
    let ns = stream.cursor_namespace(ctx.db);
    let id = if stream.invalidated() {
        0
    } else {
        let mut cursor = Cursor::new(
            ns.clone(),
            None,
            CursorSource::Buffered(Default::default()),
            None,
            None,
        );
        cursor.tailable = true;
        cursor.await_data = true;
        cursor.change_stream = Some(Box::new(stream));
        cursor.session = ctx.session.map(<[u8]>::to_vec);
        cursor.owner = ctx.client.auth.users();
        ctx.state.cursors.register(cursor, ctx.state.clock.now_ms())
    };
    Ok(reply(id, &ns, batch, token, "firstBatch"))
}

/// `getMore` on a change stream's cursor: the events committed since the last batch, waiting
/// up to `maxTimeMS` (default 1 s) for the first one.
pub async fn get_more(
    ctx: &CommandContext<'_>,
    id: i64,
    mut cursor: Cursor,
    batch_size: Option<u64>,
    body: &Document,
) -> CommandResult<Reply> {
    let await_ms = match optional_i64(ctx, body, "maxTimeMS")? {
        Some(ms) if ms > 0 => ms as u64,
        _ => DEFAULT_AWAIT_MS,
    };
    let Some(mut stream) = cursor.change_stream.take() else {
        return Err(CommandError::internal("not a change stream cursor"));
    };
    let until = tokio::time::Instant::now() + std::time::Duration::from_millis(await_ms);
    let reader = reader(ctx);
    let (batch, token) = stream
        .await_batch(&reader, batch_size.unwrap_or(u64::MAX), until)
        .await?;
    let ns = cursor.ns.clone();
    let reply_id = if stream.invalidated() {
        0
    } else {
        cursor.change_stream = Some(stream);
        ctx.state
            .cursors
            .checkin(id, cursor, ctx.state.clock.now_ms());
        id
    };
    Ok(reply(reply_id, &ns, batch, token, "nextBatch"))
}
