// Real-client checks with the Node.js `mongodb` driver against a running tideway server.
//
// Usage: node check_node.mjs PORT
// The driver is loaded from $TIDEWAY_CLIENTS_NODE_DIR/node_modules (run.sh installs it into
// target/clients/node); without that variable, from the usual Node resolution.
//
// Prints `PASS name` / `FAIL name` (with indented details) / `SKIP name: why` per check and
// exits non-zero if any failed. Each scenario is one async function in SCENARIOS, taking the
// context { port, client, compressor, label }; scenarios run once per configuration in CONFIGS.

import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import path from 'node:path';
import { inspect, isDeepStrictEqual } from 'node:util';

const require = createRequire(
  process.env.TIDEWAY_CLIENTS_NODE_DIR
    ? path.join(process.env.TIDEWAY_CLIENTS_NODE_DIR, 'package.json')
    : import.meta.url,
);
const { MongoBulkWriteError, MongoClient, MongoClientBulkWriteError, MongoServerError } = require('mongodb');

const SERVER_VERSION = '8.0.0';
const MAX_WIRE_VERSION = 25;

/** Thrown by a scenario that does not apply to the current configuration. */
class Skip extends Error {}

const port = Number(process.argv[2]);
if (!Number.isInteger(port) || port <= 0) {
  console.error('usage: node check_node.mjs PORT');
  process.exit(2);
}

function connectOptions(compressor) {
  const options = { serverSelectionTimeoutMS: 3000, directConnection: true };
  if (compressor) options.compressors = [compressor];
  return options;
}

async function connect(compressor) {
  const client = new MongoClient(`mongodb://127.0.0.1:${port}/?directConnection=true`, connectOptions(compressor));
  await client.connect();
  return client;
}

async function decompressorBytesIn(name) {
  // Read with a separate uncompressed client so the read itself does not move the counters.
  const observer = await connect(null);
  try {
    const status = await observer.db('admin').command({ serverStatus: 1 });
    const value = status?.network?.compression?.[name]?.decompressor?.bytesIn;
    assert.ok(
      typeof value === 'number' || typeof value === 'bigint',
      `serverStatus.network.compression.${name}.decompressor.bytesIn is ${JSON.stringify(value)}, expected a number`,
    );
    return Number(value);
  } finally {
    await observer.close();
  }
}

// --- scenarios ---------------------------------------------------------------------------------

async function ping({ client }) {
  const reply = await client.db('admin').admin().ping();
  assert.equal(reply.ok, 1, `ping: server answered ${JSON.stringify(reply)}, client expected ok: 1`);
}

async function buildInfo({ client }) {
  const reply = await client.db('admin').admin().command({ buildInfo: 1 });
  assert.equal(reply.version, SERVER_VERSION,
    `buildInfo.version: server answered ${JSON.stringify(reply.version)}, client expected "${SERVER_VERSION}"`);
}

async function hello({ client }) {
  const reply = await client.db('admin').command({ hello: 1 });
  assert.equal(reply.isWritablePrimary, true,
    `hello.isWritablePrimary: server answered ${JSON.stringify(reply.isWritablePrimary)}, client expected true`);
  assert.equal(reply.maxWireVersion, MAX_WIRE_VERSION,
    `hello.maxWireVersion: server answered ${JSON.stringify(reply.maxWireVersion)}, client expected ${MAX_WIRE_VERSION}`);
}

async function unknownCommand({ client }) {
  let reply;
  try {
    reply = await client.db('admin').command({ tidewayNoSuchCommand: 1 });
  } catch (err) {
    assert.ok(err instanceof MongoServerError, `expected a MongoServerError, got ${err}`);
    assert.equal(err.code, 59, `unknown command: server answered code ${err.code}, client expected 59`);
    assert.equal(err.codeName, 'CommandNotFound',
      `unknown command: server answered codeName ${err.codeName}, client expected CommandNotFound`);
    return;
  }
  assert.fail(`an unknown command succeeded: server answered ${JSON.stringify(reply)}`);
}

async function compressionUsed({ client, compressor }) {
  if (!compressor) throw new Skip('no compressor in this configuration');
  const before = await decompressorBytesIn(compressor);
  await client.db('admin').admin().ping();
  await client.db('admin').command({ buildInfo: 1 });
  const after = await decompressorBytesIn(compressor);
  assert.ok(after > before,
    `serverStatus.network.compression.${compressor}.decompressor.bytesIn did not grow (${before} -> ${after}) ` +
    `after commands from a client with compressors=["${compressor}"]: the requests were not sent compressed`);
}

// --- CRUD scenarios: each works in a database of its own (withScratchDb) and checks every answer --

function show(value) {
  return inspect(value, { depth: null, breakLength: Infinity });
}

function expectEqual(what, actual, expected) {
  if (!isDeepStrictEqual(actual, expected)) {
    assert.fail(`${what}: server answered ${show(actual)}, client expected ${show(expected)}`);
  }
}

/** Runs fn(db) on a database of the scenario's own, dropped before and after. */
async function withScratchDb({ client, label }, name, fn) {
  const db = client.db(`clients_node_${label}_${name}`);
  await db.dropDatabase();
  try {
    await fn(db);
  } finally {
    await db.dropDatabase();
  }
}

/** Awaits `promise`, which must fail with a MongoServerError (or a subclass) of this code. */
async function expectServerError(what, promise, code) {
  let value;
  try {
    value = await promise;
  } catch (err) {
    assert.ok(err instanceof MongoServerError, `${what}: expected a MongoServerError, got ${err?.stack ?? err}`);
    assert.equal(err.code, code, `${what}: server answered code ${err.code} (${err.message}), client expected ${code}`);
    return err;
  }
  assert.fail(`${what}: succeeded with ${show(value)} although mongod answers error ${code}`);
}

const allDocs = (coll) => coll.find().sort({ _id: 1 }).toArray();
const idsOf = (docs) => docs.map((d) => d._id);
const ITEMS = Array.from({ length: 10 }, (_, k) => {
  const i = k + 1;
  return { _id: i, n: i, grp: i % 3, name: `item${String(i).padStart(2, '0')}` };
});

async function crudInsertFind(ctx) {
  await withScratchDb(ctx, 'insert_find', async (db) => {
    const coll = db.collection('items');
    const one = await coll.insertOne({ ...ITEMS[0] });
    expectEqual('insertOne: acknowledged', one.acknowledged, true);
    expectEqual('insertOne: insertedId', one.insertedId, 1);
    const many = await coll.insertMany(ITEMS.slice(1).map((d) => ({ ...d })));
    expectEqual('insertMany: insertedCount', many.insertedCount, 9);
    expectEqual('insertMany: insertedIds', Object.values(many.insertedIds), [2, 3, 4, 5, 6, 7, 8, 9, 10]);
    expectEqual('all documents after the inserts', await allDocs(coll), ITEMS);

    expectEqual('findOne({_id: 4})', await coll.findOne({ _id: 4 }), ITEMS[3]);
    expectEqual('findOne({_id: 404})', await coll.findOne({ _id: 404 }), null);
    expectEqual('find({grp: 1}).sort({n: -1}): _ids',
      idsOf(await coll.find({ grp: 1 }).sort({ n: -1 }).toArray()), [10, 7, 4, 1]);
    expectEqual('find({}, {projection: {name: 1, _id: 0}}).sort({n: -1}).skip(2).limit(3)',
      await coll.find({}, { projection: { name: 1, _id: 0 } }).sort({ n: -1 }).skip(2).limit(3).toArray(),
      [{ name: 'item08' }, { name: 'item07' }, { name: 'item06' }]);
    expectEqual('find().sort({grp: 1, n: -1}).project({_id: 1})',
      await coll.find().sort({ grp: 1, n: -1 }).project({ _id: 1 }).toArray(),
      [9, 6, 3, 10, 7, 4, 1, 8, 5, 2].map((i) => ({ _id: i })));
    expectEqual('find({n: {$gte: 3, $lte: 8}, grp: {$ne: 0}}).sort({n: 1}): _ids',
      idsOf(await coll.find({ n: { $gte: 3, $lte: 8 }, grp: { $ne: 0 } }).sort({ n: 1 }).toArray()), [4, 5, 7, 8]);
  });
}

async function crudCursorPaging(ctx) {
  // A client of its own, to watch the find/getMore/killCursors commands go by.
  const client = new MongoClient(`mongodb://127.0.0.1:${ctx.port}/?directConnection=true`,
    { ...connectOptions(ctx.compressor), monitorCommands: true });
  const started = [];
  const succeeded = [];
  client.on('commandStarted', (e) => started.push(e));
  client.on('commandSucceeded', (e) => succeeded.push(e));
  const named = (name) => [
    started.filter((e) => e.commandName === name).map((e) => e.command),
    succeeded.filter((e) => e.commandName === name).map((e) => e.reply),
  ];
  const clear = () => { started.length = 0; succeeded.length = 0; };
  try {
    await client.connect();
    await withScratchDb(ctx, 'paging', async (scratch) => {
      const coll = client.db(scratch.databaseName).collection('pages');
      const ns = `${scratch.databaseName}.pages`;
      const docs = Array.from({ length: 20 }, (_, i) => ({ _id: i, sq: i * i }));
      await coll.insertMany(docs.map((d) => ({ ...d })));

      clear();
      expectEqual('find().sort({_id: 1}).batchSize(3).toArray()',
        await coll.find().sort({ _id: 1 }).batchSize(3).toArray(), docs);
      const [finds, findReplies] = named('find');
      const [more, moreReplies] = named('getMore');
      expectEqual('find commands sent', finds.length, 1);
      expectEqual('find: batchSize sent', finds[0].batchSize, 3);
      const first = findReplies[0].cursor;
      expectEqual('find reply: cursor.ns', first.ns, ns);
      expectEqual('find reply: firstBatch', first.firstBatch, docs.slice(0, 3));
      const cursorId = String(first.id);
      assert.notEqual(cursorId, '0', 'find reply: cursor id 0 although 17 documents remain');
      expectEqual('getMore replies: nextBatch sizes',
        moreReplies.map((r) => r.cursor.nextBatch.length), [3, 3, 3, 3, 3, 2]);
      expectEqual('getMore replies: documents', moreReplies.flatMap((r) => r.cursor.nextBatch), docs.slice(3));
      expectEqual('getMore: cursor ids sent', more.map((c) => String(c.getMore)), Array(6).fill(cursorId));
      expectEqual('getMore replies: cursor.id (0 once exhausted)', moreReplies.map((r) => String(r.cursor.id)),
        [...Array(5).fill(cursorId), '0']);
      expectEqual('killCursors sent for an exhausted cursor', named('killCursors')[0], []);

      // Closing a cursor half way kills it on the server.
      clear();
      const cursor = coll.find().sort({ _id: 1 }).batchSize(3);
      const head = [];
      for (let i = 0; i < 4; i++) head.push(await cursor.next());
      expectEqual('first four documents of a batchSize(3) cursor', head, docs.slice(0, 4));
      const openId = String(cursor.id);
      await cursor.close();
      const [kills, killReplies] = named('killCursors');
      expectEqual('killCursors commands sent by cursor.close()', kills.length, 1);
      expectEqual('killCursors: cursors sent', kills[0].cursors.map(String), [openId]);
      expectEqual('killCursors reply: cursorsKilled', killReplies[0].cursorsKilled.map(String), [openId]);
      expectEqual('killCursors reply: cursorsNotFound', killReplies[0].cursorsNotFound, []);
    });
  } finally {
    await client.close();
  }
}

async function crudUpdate(ctx) {
  await withScratchDb(ctx, 'update', async (db) => {
    const coll = db.collection('stock');
    await coll.insertMany([{ _id: 1, a: 1 }, { _id: 2, a: 2 }, { _id: 3, a: 3 }]);
    // [matchedCount, modifiedCount, upsertedCount, upsertedId] of an update's result.
    const counts = async (promise) => {
      const r = await promise;
      return [r.matchedCount, r.modifiedCount, r.upsertedCount, r.upsertedId];
    };
    expectEqual('updateOne({_id: 1}, {$set: {b: 2}}): counts',
      await counts(coll.updateOne({ _id: 1 }, { $set: { b: 2 } })), [1, 1, 0, null]);
    expectEqual('updateOne setting the value a field already has: counts',
      await counts(coll.updateOne({ _id: 1 }, { $set: { b: 2 } })), [1, 0, 0, null]);
    expectEqual('updateMany({a: {$gte: 2}}, {$inc: {a: 10}}): counts',
      await counts(coll.updateMany({ a: { $gte: 2 } }, { $inc: { a: 10 } })), [2, 2, 0, null]);
    expectEqual('replaceOne({_id: 2}, {z: 1}): counts',
      await counts(coll.replaceOne({ _id: 2 }, { z: 1 })), [1, 1, 0, null]);
    expectEqual('replaceOne({_id: 7}, {z: 7}, {upsert: true}): counts',
      await counts(coll.replaceOne({ _id: 7 }, { z: 7 }, { upsert: true })), [0, 0, 1, 7]);
    expectEqual('updateOne({_id: 8}, {$set: {y: 1}}, {upsert: true}): counts',
      await counts(coll.updateOne({ _id: 8 }, { $set: { y: 1 } }, { upsert: true })), [0, 0, 1, 8]);
    expectEqual('all documents after the updates', await allDocs(coll), [
      { _id: 1, a: 1, b: 2 }, { _id: 2, z: 1 }, { _id: 3, a: 13 }, { _id: 7, z: 7 }, { _id: 8, y: 1 },
    ]);
    await expectServerError('updateOne with the unknown modifier $frobnicate',
      coll.updateOne({ _id: 1 }, { $frobnicate: { a: 1 } }), 9);
  });
}

async function crudFindOneAndUpdate(ctx) {
  await withScratchDb(ctx, 'find_and_modify', async (db) => {
    const coll = db.collection('counters');
    await coll.insertMany([{ _id: 1, n: 1, grp: 'x' }, { _id: 2, n: 5, grp: 'x' }, { _id: 3, n: 3, grp: 'y' }]);
    expectEqual("findOneAndUpdate($inc, {returnDocument: 'after'})",
      await coll.findOneAndUpdate({ _id: 1 }, { $inc: { n: 1 } }, { returnDocument: 'after' }),
      { _id: 1, n: 2, grp: 'x' });
    expectEqual("findOneAndUpdate($inc, {returnDocument: 'before'})",
      await coll.findOneAndUpdate({ _id: 1 }, { $inc: { n: 1 } }, { returnDocument: 'before' }),
      { _id: 1, n: 2, grp: 'x' });
    expectEqual("findOneAndUpdate({grp: 'x'}, $set, {sort: {n: -1}, projection: {picked: 1}, returnDocument: 'after'})",
      await coll.findOneAndUpdate({ grp: 'x' }, { $set: { picked: true } },
        { sort: { n: -1 }, projection: { picked: 1 }, returnDocument: 'after' }),
      { _id: 2, picked: true });
    expectEqual('findOneAndUpdate matching nothing',
      await coll.findOneAndUpdate({ _id: 404 }, { $set: { n: 0 } }), null);
    expectEqual("findOneAndUpdate({_id: 50}, $set, {upsert: true, returnDocument: 'after'})",
      await coll.findOneAndUpdate({ _id: 50 }, { $set: { n: 1 } }, { upsert: true, returnDocument: 'after' }),
      { _id: 50, n: 1 });
    const withMeta = await coll.findOneAndUpdate({ _id: 3 }, { $set: { n: 30 } },
      { returnDocument: 'after', includeResultMetadata: true });
    expectEqual('findOneAndUpdate(includeResultMetadata): value', withMeta.value, { _id: 3, n: 30, grp: 'y' });
    expectEqual('findOneAndUpdate(includeResultMetadata): lastErrorObject', withMeta.lastErrorObject,
      { n: 1, updatedExisting: true });
    expectEqual('findOneAndDelete({grp: "x"}, {sort: {n: 1}})',
      await coll.findOneAndDelete({ grp: 'x' }, { sort: { n: 1 } }), { _id: 1, n: 3, grp: 'x' });
    expectEqual('all documents after findOneAndUpdate/findOneAndDelete', await allDocs(coll), [
      { _id: 2, n: 5, grp: 'x', picked: true }, { _id: 3, n: 30, grp: 'y' }, { _id: 50, n: 1 },
    ]);
  });
}

async function crudDelete(ctx) {
  await withScratchDb(ctx, 'delete', async (db) => {
    const coll = db.collection('trash');
    await coll.insertMany(Array.from({ length: 10 }, (_, k) => ({ _id: k + 1, grp: (k + 1) % 2 })));
    expectEqual('deleteOne({grp: 0}): deletedCount', (await coll.deleteOne({ grp: 0 })).deletedCount, 1);
    expectEqual('deleteMany({grp: 1}): deletedCount', (await coll.deleteMany({ grp: 1 })).deletedCount, 5);
    expectEqual('deleteMany matching nothing: deletedCount', (await coll.deleteMany({ grp: 7 })).deletedCount, 0);
    expectEqual('_ids after the deletes', idsOf(await allDocs(coll)), [4, 6, 8, 10]);
    expectEqual('estimatedDocumentCount()', await coll.estimatedDocumentCount(), 4);
    expectEqual('deleteMany({}): deletedCount', (await coll.deleteMany({})).deletedCount, 4);
    expectEqual('estimatedDocumentCount() after deleteMany({})', await coll.estimatedDocumentCount(), 0);
  });
}

async function crudUniqueIndex(ctx) {
  await withScratchDb(ctx, 'unique_index', async (db) => {
    const coll = db.collection('users');
    expectEqual('createIndex({email: 1}, {unique: true})',
      await coll.createIndex({ email: 1 }, { unique: true }), 'email_1');
    const indexes = await coll.listIndexes().toArray();
    expectEqual('listIndexes: names', indexes.map((i) => i.name), ['_id_', 'email_1']);
    const emailIndex = indexes.find((i) => i.name === 'email_1');
    expectEqual('listIndexes: email_1 key', emailIndex.key, { email: 1 });
    expectEqual('listIndexes: email_1 unique', emailIndex.unique, true);
    await coll.insertOne({ _id: 1, email: 'a@example.com' });
    const err = await expectServerError('insertOne with a duplicate email',
      coll.insertOne({ _id: 2, email: 'a@example.com' }), 11000);
    expectEqual('duplicate email: keyPattern', err.keyPattern, { email: 1 });
    expectEqual('duplicate email: keyValue', err.keyValue, { email: 'a@example.com' });
    assert.match(err.message,
      /^E11000 duplicate key error collection: \S+\.users index: email_1 dup key: \{ email: "a@example\.com" \}$/,
      `duplicate email: message ${JSON.stringify(err.message)}`);

    let bulkError;
    try {
      await coll.insertMany([{ _id: 3, email: 'b' }, { _id: 4, email: 'a@example.com' }, { _id: 5, email: 'c' }]);
    } catch (e) {
      bulkError = e;
    }
    assert.ok(bulkError instanceof MongoBulkWriteError,
      `ordered insertMany with a duplicate: expected a MongoBulkWriteError, got ${bulkError?.stack ?? 'success'}`);
    expectEqual('ordered insertMany with a duplicate: insertedCount', bulkError.insertedCount, 1);
    expectEqual('ordered insertMany with a duplicate: writeErrors (index, code)',
      [bulkError.writeErrors].flat().map((e) => [e.index, e.code]), [[1, 11000]]);
    await expectServerError('updateOne creating a duplicate',
      coll.updateOne({ _id: 3 }, { $set: { email: 'a@example.com' } }), 11000);
    expectEqual('documents after the rejected writes', await allDocs(coll),
      [{ _id: 1, email: 'a@example.com' }, { _id: 3, email: 'b' }]);

    expectEqual('dropIndex("email_1"): ok', (await coll.dropIndex('email_1')).ok, 1);
    await coll.insertOne({ _id: 20, email: 'a@example.com' });
    expectEqual('indexes after dropIndex', (await coll.indexes()).map((i) => i.name), ['_id_']);
  });
}

async function crudCatalog(ctx) {
  await withScratchDb(ctx, 'catalog', async (db) => {
    await db.createCollection('alpha');
    await db.collection('beta').insertMany([
      { _id: 1, color: 'red' }, { _id: 2, color: 'blue' }, { _id: 3, color: 'red' },
    ]);
    const listed = await db.listCollections().toArray();
    expectEqual('listCollections: (name, type)', listed.map((c) => [c.name, c.type]).sort(),
      [['alpha', 'collection'], ['beta', 'collection']]);
    expectEqual('listCollections({name: "beta"}, {nameOnly: true})',
      (await db.listCollections({ name: 'beta' }, { nameOnly: true }).toArray()).map((c) => c.name), ['beta']);
    expectEqual('estimatedDocumentCount() of beta', await db.collection('beta').estimatedDocumentCount(), 3);
    expectEqual('estimatedDocumentCount() of alpha (empty)', await db.collection('alpha').estimatedDocumentCount(), 0);
    expectEqual('distinct("color") (sorted)', (await db.collection('beta').distinct('color')).sort(), ['blue', 'red']);
    const { databases } = await ctx.client.db('admin').admin().listDatabases();
    assert.ok(databases.some((d) => d.name === db.databaseName),
      `listDatabases: ${show(databases.map((d) => d.name))} lacks ${db.databaseName}`);

    await db.renameCollection('beta', 'gamma');
    expectEqual('collections after renaming beta to gamma',
      (await db.listCollections().toArray()).map((c) => c.name).sort(), ['alpha', 'gamma']);
    expectEqual('gamma after the rename', idsOf(await allDocs(db.collection('gamma'))), [1, 2, 3]);
    expectEqual('drop("alpha")', await db.collection('alpha').drop(), true);
    expectEqual('collections after the drop', (await db.listCollections().toArray()).map((c) => c.name), ['gamma']);

    expectEqual('dropDatabase()', await db.dropDatabase(), true);
    const after = (await ctx.client.db('admin').admin().listDatabases()).databases.map((d) => d.name);
    assert.ok(!after.includes(db.databaseName),
      `listDatabases after dropDatabase still has ${db.databaseName}: ${show(after)}`);
    expectEqual('listCollections after dropDatabase', await db.listCollections().toArray(), []);
  });
}

async function plannerExplain(ctx) {
  await withScratchDb(ctx, 'planner', async (db) => {
    const coll = db.collection('events');
    await coll.insertMany(Array.from({ length: 1000 }, (_, i) => ({ _id: i, at: i * 10, user: i % 20 })));
    await coll.createIndex({ at: 1 });
    const plan = await coll.find({ at: { $gte: 1000, $lt: 1100 } }).explain('executionStats');
    const scan = plan.queryPlanner.winningPlan.inputStage;
    expectEqual('explain("executionStats"): IXSCAN at_1 over [1000, 1100)',
      [scan.stage, scan.indexName, scan.indexBounds], ['IXSCAN', 'at_1', { at: ['[1000, 1100)'] }]);
    expectEqual('explain("executionStats"): nReturned, totalKeysExamined',
      [plan.executionStats.nReturned, plan.executionStats.totalKeysExamined], [10, 10]);
    expectEqual('find().sort({at: -1}).limit(3)',
      idsOf(await coll.find({}, { projection: { _id: 1 } }).sort({ at: -1 }).limit(3).toArray()), [999, 998, 997]);
  });
}

async function queryLanguage(ctx) {
  await withScratchDb(ctx, 'language', async (db) => {
    const students = db.collection('students');
    await students.insertMany([
      { _id: 1, grades: [95, 92, 90] },
      { _id: 2, grades: [98, 100, 102] },
      { _id: 3, grades: [95, 110, 100] },
    ]);
    await students.updateMany({}, { $set: { 'grades.$[element]': 100 } },
      { arrayFilters: [{ element: { $gte: 100 } }] });
    expectEqual('updateMany with arrayFilters', await students.find().toArray(), [
      { _id: 1, grades: [95, 92, 90] },
      { _id: 2, grades: [98, 100, 100] },
      { _id: 3, grades: [95, 100, 100] },
    ]);
    await students.updateOne({ _id: 1 }, [{ $set: { best: { $max: '$grades' } } }]);
    expectEqual('pipeline-style updateOne', await students.findOne({ _id: 1 }),
      { _id: 1, grades: [95, 92, 90], best: 95 });
    expectEqual('positional projection', await students.find({ grades: { $gte: 95 } }, { projection: { 'grades.$': 1 } }).toArray(),
      [{ _id: 1, grades: [95] }, { _id: 2, grades: [98] }, { _id: 3, grades: [95] }]);
    expectEqual('$expr', idsOf(await students.find({ $expr: { $gt: [{ $size: '$grades' }, 2] }, best: { $exists: true } }).toArray()), [1]);
    expectEqual('$bitsAllSet', idsOf(await students.find({ _id: { $bitsAllSet: [0] } }).toArray()), [1, 3]);
    expectEqual('aggregation expression in a find projection',
      await students.findOne({ _id: 1 }, { projection: { _id: 0, top: { $max: '$grades' } } }), { top: 95 });
    expectEqual('find with let', idsOf(await students.find({ $expr: { $eq: ['$best', '$$best'] } }, { let: { best: 95 } }).toArray()), [1]);
    // Collation: a case-insensitive collection default, overridden per operation.
    const people = await db.createCollection('people', { collation: { locale: 'en', strength: 2 } });
    await people.insertMany([{ _id: 1, name: 'Ann' }, { _id: 2, name: 'bob' }, { _id: 3, name: 'ann' }]);
    expectEqual('collection default collation', idsOf(await people.find({ name: 'ANN' }).sort({ _id: 1 }).toArray()), [1, 3]);
    expectEqual('countDocuments with the simple collation', await people.countDocuments({ name: 'ANN' }, { collation: { locale: 'simple' } }), 0);
    expectEqual('sort with collation en', idsOf(await people.find({}, { collation: { locale: 'en' } }).sort({ name: 1, _id: 1 }).toArray()), [3, 1, 2]);
  });
}

/** MongoClient.bulkWrite (the 8.0 bulkWrite command): the bulkWrite reference page's
 *  two-namespace pizzas example with verbose results, then an ordered batch stopped by a
 *  duplicate key. */
async function clientBulkWrite(ctx) {
  await withScratchDb(ctx, 'client_bulk_write', async (db) => {
    await db.collection('pizzas').insertMany([
      { _id: 0, type: 'pepperoni', size: 'small', price: 4 },
      { _id: 1, type: 'cheese', size: 'medium', price: 7 },
      { _id: 2, type: 'vegan', size: 'large', price: 8 },
    ]);
    await db.collection('pizzaOrders').insertMany([
      { _id: 0, type: 'pepperoni', number: 5, orderDate: new Date('2023-01-15T12:00:00Z') },
      { _id: 1, type: 'cheese', number: 15, orderDate: new Date('2023-01-23T11:12:32Z') },
      { _id: 2, type: 'vegan', number: 20, orderDate: new Date('2023-03-20T10:01:12Z') },
    ]);
    const pizzas = `${db.databaseName}.pizzas`;
    const orders = `${db.databaseName}.pizzaOrders`;
    const result = await ctx.client.bulkWrite([
      { namespace: pizzas, name: 'insertOne', document: { _id: 5, type: 'sausage', size: 'small', price: 12 } },
      { namespace: pizzas, name: 'insertOne', document: { _id: 6, type: 'vegan cheese', size: 'large', price: 25 } },
      { namespace: pizzas, name: 'updateOne', filter: { type: 'cheese' }, update: { $set: { price: 15 } } },
      { namespace: pizzas, name: 'deleteOne', filter: { price: { $lt: 7 } } },
      { namespace: orders, name: 'insertOne',
        document: { _id: 3, type: 'sausage', number: 7, orderDate: new Date('2023-04-15T12:02:15Z') } },
      { namespace: orders, name: 'insertOne',
        document: { _id: 4, type: 'vegan', number: 16, orderDate: new Date('2023-05-12T11:03:11Z') } },
      { namespace: orders, name: 'updateOne', filter: { type: 'cheese' }, update: { $set: { number: 50 } } },
      { namespace: orders, name: 'deleteOne', filter: { _id: 2 } },
      { namespace: orders, name: 'deleteOne', filter: { orderDate: { $lte: new Date('2023-03-15T00:00:00Z') } } },
      { namespace: orders, name: 'updateOne', filter: { _id: 'new' }, update: { $set: { number: 1 } }, upsert: true },
    ], { verboseResults: true });
    expectEqual('bulkWrite counts', {
      inserted: result.insertedCount, matched: result.matchedCount, modified: result.modifiedCount,
      upserted: result.upsertedCount, deleted: result.deletedCount,
    }, { inserted: 4, matched: 2, modified: 2, upserted: 1, deleted: 3 });
    expectEqual('bulkWrite insertResults', [...result.insertResults.entries()].map(([i, r]) => [i, r.insertedId]),
      [[0, 5], [1, 6], [4, 3], [5, 4]]);
    // An upsert's result counts the document it inserted as matched (mongod's `n: 1`).
    expectEqual('bulkWrite updateResults', [...result.updateResults.entries()].map(([i, r]) => [i, r.matchedCount, r.modifiedCount, r.upsertedId]),
      [[2, 1, 1, undefined], [6, 1, 1, undefined], [9, 1, 0, 'new']]);
    expectEqual('bulkWrite deleteResults', [...result.deleteResults.entries()].map(([i, r]) => [i, r.deletedCount]),
      [[3, 1], [7, 1], [8, 1]]);
    expectEqual('pizzas after bulkWrite', idsOf(await allDocs(db.collection('pizzas'))), [1, 2, 5, 6]);
    expectEqual('pizzaOrders after bulkWrite', idsOf(await allDocs(db.collection('pizzaOrders'))), [1, 3, 4, 'new']);

    let error;
    try {
      await ctx.client.bulkWrite([
        { namespace: pizzas, name: 'insertOne', document: { _id: 7, type: 'tomato' } },
        { namespace: pizzas, name: 'insertOne', document: { _id: 1, type: 'duplicate' } },
        { namespace: pizzas, name: 'insertOne', document: { _id: 8, type: 'never written' } },
      ]);
    } catch (err) {
      error = err;
    }
    assert.ok(error instanceof MongoClientBulkWriteError,
      `an ordered bulkWrite with a duplicate _id: expected a MongoClientBulkWriteError, got ${error?.stack ?? error}`);
    expectEqual('bulkWrite duplicate: write errors', [...error.writeErrors.entries()].map(([i, e]) => [i, e.code]),
      [[1, 11000]]);
    expectEqual('bulkWrite duplicate: partial insertedCount', error.partialResult?.insertedCount, 1);
    expectEqual('pizzas after the failed bulkWrite', idsOf(await allDocs(db.collection('pizzas'))), [1, 2, 5, 6, 7]);
  });
}

const SCENARIOS = [
  ['ping', ping],
  ['buildInfo', buildInfo],
  ['hello', hello],
  ['unknown_command', unknownCommand],
  ['compression', compressionUsed],
  ['crud_insert_find', crudInsertFind],
  ['crud_cursor_paging', crudCursorPaging],
  ['crud_update', crudUpdate],
  ['crud_find_one_and_update', crudFindOneAndUpdate],
  ['crud_delete', crudDelete],
  ['crud_unique_index', crudUniqueIndex],
  ['crud_catalog', crudCatalog],
  ['planner_explain', plannerExplain],
  ['query_language', queryLanguage],
  ['client_bulk_write', clientBulkWrite],
];

// The driver does zlib itself; snappy and zstd would need extra native npm packages.
const CONFIGS = [null, 'zlib'];

// --- runner ------------------------------------------------------------------------------------

function reportFailure(name, err) {
  console.log(`FAIL ${name}`);
  const text = err instanceof assert.AssertionError ? err.message : (err?.stack ?? String(err));
  for (const line of text.split('\n')) console.log(`    ${line}`);
}

let failed = 0;
for (const compressor of CONFIGS) {
  const label = compressor ?? 'none';
  let client;
  try {
    client = await connect(compressor);
    console.log(`PASS node[${label}]/connect`);
  } catch (err) {
    reportFailure(`node[${label}]/connect`, err);
    failed++;
    continue;
  }
  const ctx = { port, client, compressor, label };
  for (const [scenarioName, fn] of SCENARIOS) {
    const name = `node[${label}]/${scenarioName}`;
    try {
      await fn(ctx);
      console.log(`PASS ${name}`);
    } catch (err) {
      if (err instanceof Skip) {
        continue; // not applicable to this configuration; nothing to report
      }
      reportFailure(name, err);
      failed++;
    }
  }
  try {
    await client.close();
    console.log(`PASS node[${label}]/close`);
  } catch (err) {
    reportFailure(`node[${label}]/close`, err);
    failed++;
  }
}
process.exitCode = failed ? 1 : 0;
