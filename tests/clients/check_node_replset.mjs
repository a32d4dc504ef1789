// Replica-set mode checks with the Node.js `mongodb` driver against a tideway started with
// `--replSet rs0`: connecting with `?replicaSet=rs0` (retryable writes, the driver's default
// there), and `watch()` receiving the manual's change events and a TTL expiry as a delete event
// marked `expired` (tideway's extension, docs/ttl.md).
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

process.exitCode = failed ? 1 : 0;
