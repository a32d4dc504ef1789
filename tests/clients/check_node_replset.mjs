// Replica-set mode checks with the Node.js `mongodb` driver against a tideway started with
// `--replSet rs0`: connecting with `?replicaSet=rs0` (retryable writes, the driver's default
// there), and `watch()` receiving the manual's change events and a TTL expiry as a delete event
// marked `expired` (tideway's extension, docs/ttl.md); and transactions through
// `session.withTransaction()`: the manual's two-collection example commits atomically, a callback
// that throws aborts (nothing visible, the error rethrown, no retry), and a WriteConflict (112,
// labelled `TransientTransactionError`) is retried by the helper to success. Expected behaviour:
// the convenient transactions API spec (transactions-convenient-api.md) and mongod's
// WriteConflict for a write to a document changed since the transaction's snapshot.
//
// Usage: node check_node_replset.mjs PORT
// Prints `PASS name` / `FAIL name` lines and exits non-zero if a check failed.

import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import path from 'node:path';
import { inspect } from 'node:util';

const require = createRequire(
  process.env.TIDEWAY_CLIENTS_NODE_DIR
    ? path.join(process.env.TIDEWAY_CLIENTS_NODE_DIR, 'package.json')
    : import.meta.url,
);
const { MongoClient } = require('mongodb');

const port = Number(process.argv[2]);
let failed = 0;

async function check(name, scenario) {
  const client = new MongoClient(`mongodb://127.0.0.1:${port}/?replicaSet=rs0`, {
    serverSelectionTimeoutMS: 5000,
  });
  try {
    await client.connect();
    await scenario(client);
    console.log(`PASS node-replset/${name}`);
  } catch (err) {
    failed++;
    console.log(`FAIL node-replset/${name}`);
    console.log(`    ${inspect(err, { depth: 6 }).replaceAll('\n', '\n    ')}`);
  } finally {
    await client.close();
  }
}

await check('retryable_writes', async (client) => {
  const coll = client.db('test').collection('node_replset');
  await coll.drop().catch(() => {});
  await coll.insertOne({ _id: 1, a: 1 });
  await coll.updateOne({ _id: 1 }, { $inc: { a: 1 } });
  const before = await coll.findOneAndUpdate({ _id: 1 }, { $inc: { a: 1 } });
  assert.equal(before.a, 2);
  assert.equal(await coll.countDocuments({}), 1);
});

await check('watch_receives_changes_and_expiry', async (client) => {
  const coll = client.db('test').collection('node_watch');
  await coll.drop().catch(() => {});
  await coll.createIndex({ at: 1 }, { expireAfterSeconds: 0 });
  const stream = coll.watch([], { maxAwaitTimeMS: 500 });
  const seen = [];
  const collected = (async () => {
    for await (const change of stream) {
      seen.push(change);
      if (seen.length === 4) break;
    }
  })();
  // The stream's first aggregate runs when it is first iterated: let it start.
  await new Promise((resolve) => setTimeout(resolve, 300));
  await coll.insertOne({ _id: 1, a: 1 });
  await coll.updateOne({ _id: 1 }, { $set: { a: 2 } });
  // Expired at once: the reaper (every second by default) deletes it.
  await coll.insertOne({ _id: 2, at: new Date('2000-01-01T00:00:00Z') });
  const timeout = new Promise((_, reject) => setTimeout(() => reject(new Error(`timed out; seen ${inspect(seen)}`)), 15000));
  await Promise.race([collected, timeout]);
  await stream.close();
  assert.deepEqual(seen.map((change) => change.operationType), ['insert', 'update', 'insert', 'delete']);
  assert.deepEqual(seen[1].updateDescription.updatedFields, { a: 2 });
  assert.deepEqual(seen[3].documentKey, { _id: 2 });
  assert.equal(seen[3].expired, true);
  assert.ok(seen[3].expireAt instanceof Date);
});

async function freshCollections(client, ...names) {
  // The manual's example creates its collections before the transaction.
  const db = client.db('test');
  const colls = [];
  for (const name of names) {
    await db.collection(name).drop().catch(() => {});
    colls.push(await db.createCollection(name));
  }
  return colls;
}

await check('with_transaction_commits_both_collections_at_once', async (client) => {
  const [orders, inventory] = await freshCollections(client, 'node_txn_orders', 'node_txn_inventory');
  await inventory.insertOne({ _id: 'abc', qty: 100 });
  const seenOutside = [];
  const session = client.startSession();
  try {
    const result = await session.withTransaction(async (session) => {
      await orders.insertOne({ _id: 1, sku: 'abc', qty: 5 }, { session });
      await inventory.updateOne({ _id: 'abc' }, { $inc: { qty: -5 } }, { session });
      // The transaction sees its own writes; a read outside it does not.
      assert.deepEqual(await orders.findOne({ _id: 1 }, { session }), { _id: 1, sku: 'abc', qty: 5 });
      assert.equal((await inventory.findOne({ _id: 'abc' }, { session })).qty, 95);
      seenOutside.push([await orders.findOne({ _id: 1 }), (await inventory.findOne({ _id: 'abc' })).qty]);
      return 'committed';
    });
    // Driver 6+: withTransaction resolves to the callback's value.
    assert.equal(result, 'committed');
    assert.equal(session.inTransaction(), false);
  } finally {
    await session.endSession();
  }
  assert.deepEqual(seenOutside, [[null, 100]]);
  assert.deepEqual(await orders.findOne({ _id: 1 }), { _id: 1, sku: 'abc', qty: 5 });
  assert.deepEqual(await inventory.findOne({ _id: 'abc' }), { _id: 'abc', qty: 95 });
});

await check('with_transaction_callback_throwing_aborts', async (client) => {
  const [orders, inventory] = await freshCollections(client, 'node_txn_orders_aborted', 'node_txn_inventory_aborted');
  await inventory.insertOne({ _id: 'abc', qty: 100 });
  const thrown = new Error('out of stock');
  let calls = 0;
  const session = client.startSession();
  try {
    await assert.rejects(
      session.withTransaction(async (session) => {
        calls++;
        await orders.insertOne({ _id: 1, sku: 'abc' }, { session });
        await inventory.updateOne({ _id: 'abc' }, { $inc: { qty: -5 } }, { session });
        throw thrown;
      }),
      (error) => error === thrown,
    );
    assert.equal(session.inTransaction(), false);
  } finally {
    await session.endSession();
  }
  assert.equal(calls, 1, 'an error without TransientTransactionError must not be retried');
  assert.equal(await orders.countDocuments({}), 0);
  assert.deepEqual(await inventory.findOne({ _id: 'abc' }), { _id: 'abc', qty: 100 });
});

await check('with_transaction_retries_a_write_conflict', async (client) => {
  // B reads the document (its snapshot is pinned), A commits a change to it, then B writes it:
  // WriteConflict, and withTransaction runs B's callback again, now seeing A's commit. The final
  // value reflects both (10 - 1 - 2), not B's stale read (10 - 2).
  const [stock] = await freshCollections(client, 'node_txn_stock');
  await stock.insertOne({ _id: 'widget', qty: 10 });
  const conflicts = [];
  let attempts = 0;
  const session = client.startSession();
  const other = client.startSession();
  try {
    await session.withTransaction(async (session) => {
      attempts++;
      const widget = await stock.findOne({ _id: 'widget' }, { session });
      if (attempts === 1) {
        await other.withTransaction(async (other) => {
          await stock.updateOne({ _id: 'widget' }, { $inc: { qty: -1 } }, { session: other });
        });
      }
      try {
        await stock.updateOne({ _id: 'widget' }, { $set: { qty: widget.qty - 2 } }, { session });
      } catch (error) {
        conflicts.push([error.code, error.hasErrorLabel?.('TransientTransactionError')]);
        throw error;
      }
    });
  } finally {
    await session.endSession();
    await other.endSession();
  }
  assert.equal(attempts, 2);
  assert.deepEqual(conflicts, [[112, true]]);
  assert.deepEqual(await stock.findOne({ _id: 'widget' }), { _id: 'widget', qty: 7 });
});

process.exitCode = failed ? 1 : 0;
