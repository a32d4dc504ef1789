// Mongoose transactions against a tideway started with `--replSet rs0`: the Mongoose guide's
// examples (docs/transactions.html) — `session.withTransaction()` with `Model.create([...],
// { session })` and `updateOne(..., { session })` committing both collections at once, a callback
// that throws leaving nothing; `Connection#transaction()` committing, and on abort resetting the
// document's state (`isNew` true again, its API doc's example); a WriteConflict (112, labelled
// `TransientTransactionError`) retried by `Connection#transaction()` to success with the
// document state reset between attempts (Mongoose gh-13698); and the `transactionAsyncLocalStorage`
// option, under which operations inside `Connection#transaction()` join it without `{ session }`.
//
// Usage: node check_mongoose_txn.mjs PORT
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
const mongoose = require('mongoose');

const port = Number(process.argv[2]);
const uri = `mongodb://127.0.0.1:${port}/mongoose_txn?replicaSet=rs0`;
let failed = 0;

const orderSchema = new mongoose.Schema({ sku: String, qty: Number });
const inventorySchema = new mongoose.Schema({ _id: String, qty: Number });
const personSchema = new mongoose.Schema({ name: String, rank: String });

/** Models on `connection`, their collections dropped and created again (the guide's examples
 * create the collections before the transaction). */
async function freshModels(connection) {
  const Order = connection.model('Order', orderSchema, 'orders');
  const Inventory = connection.model('Inventory', inventorySchema, 'inventory');
  const Person = connection.model('Person', personSchema, 'people');
  for (const Model of [Order, Inventory, Person]) {
    await Model.collection.drop().catch(() => {});
    await Model.createCollection();
  }
  await Inventory.create({ _id: 'abc', qty: 100 });
  return { Order, Inventory, Person };
}

async function check(name, scenario, instance = mongoose) {
  const connection = instance.createConnection(uri, { serverSelectionTimeoutMS: 5000 });
  try {
    await connection.asPromise();
    await scenario(connection, await freshModels(connection));
    console.log(`PASS mongoose-txn/${name}`);
  } catch (err) {
    failed++;
    console.log(`FAIL mongoose-txn/${name}`);
    console.log(`    ${inspect(err, { depth: 6 }).replaceAll('\n', '\n    ')}`);
  } finally {
    await connection.close();
  }
}

await check('with_transaction_commits_both_collections_at_once', async (connection, { Order, Inventory }) => {
  const seenOutside = [];
  const session = await connection.startSession();
  try {
    await session.withTransaction(async () => {
      await Order.create([{ sku: 'abc', qty: 5 }], { session });
      await Inventory.updateOne({ _id: 'abc' }, { $inc: { qty: -5 } }, { session });
      assert.equal(await Order.countDocuments({ sku: 'abc' }).session(session), 1);
      seenOutside.push([await Order.countDocuments({}), (await Inventory.findById('abc').lean()).qty]);
    });
  } finally {
    await session.endSession();
  }
  assert.deepEqual(seenOutside, [[0, 100]], 'visible outside before the commit');
  const orders = await Order.find({}).lean();
  assert.deepEqual(orders.map(({ sku, qty }) => ({ sku, qty })), [{ sku: 'abc', qty: 5 }]);
  assert.equal((await Inventory.findById('abc').lean()).qty, 95);
});

await check('with_transaction_callback_throwing_aborts', async (connection, { Order, Inventory }) => {
  const thrown = new Error('out of stock');
  let calls = 0;
  const session = await connection.startSession();
  try {
    await assert.rejects(
      session.withTransaction(async () => {
        calls++;
        await Order.create([{ sku: 'abc', qty: 5 }], { session });
        await Inventory.updateOne({ _id: 'abc' }, { $inc: { qty: -5 } }, { session });
        throw thrown;
      }),
      (error) => error === thrown,
    );
  } finally {
    await session.endSession();
  }
  assert.equal(calls, 1, 'an error without TransientTransactionError must not be retried');
  assert.equal(await Order.countDocuments({}), 0);
  assert.equal((await Inventory.findById('abc').lean()).qty, 100);
});

await check('connection_transaction_commits', async (connection, { Order, Inventory }) => {
  await connection.transaction(async (session) => {
    await Order.create([{ sku: 'abc', qty: 2 }], { session });
    await Inventory.updateOne({ _id: 'abc' }, { $inc: { qty: -2 } }, { session });
  });
  assert.equal(await Order.countDocuments({ sku: 'abc', qty: 2 }), 1);
  assert.equal((await Inventory.findById('abc').lean()).qty, 98);
});

await check('connection_transaction_abort_resets_document_state', async (connection, { Person }) => {
  // Connection#transaction's API example: the save inside is undone and `isNew` is true again.
  const doc = new Person({ name: 'Will Riker' });
  let isNewInside;
  const thrown = new Error('Oops!');
  await assert.rejects(
    connection.transaction(async (session) => {
      doc.rank = 'Captain';
      await doc.save({ session });
      isNewInside = doc.isNew;
      throw thrown;
    }),
    (error) => error === thrown,
  );
  assert.equal(isNewInside, false);
  assert.equal(doc.isNew, true);
  assert.equal(await Person.countDocuments({}), 0);
  // The reset document saves normally afterwards.
  await doc.save();
  assert.deepEqual((await Person.findById(doc._id).lean()).rank, 'Captain');
});

await check('connection_transaction_retries_a_write_conflict', async (connection, { Order, Inventory }) => {
  // A document built outside the transaction is saved inside it; then the transaction's write to
  // the inventory conflicts with another transaction committed after its snapshot (WriteConflict,
  // TransientTransactionError). Connection#transaction retries, resetting the order's `isNew`
  // (gh-13698), so the retry inserts it again; the final quantity reflects both transactions.
  const order = new Order({ sku: 'abc', qty: 3 });
  const conflicts = [];
  let attempts = 0;
  const other = await connection.startSession();
  try {
    await connection.transaction(async (session) => {
      attempts++;
      const item = await Inventory.findById('abc').session(session);
      await order.save({ session });
      if (attempts === 1) {
        await other.withTransaction(async () => {
          await Inventory.updateOne({ _id: 'abc' }, { $inc: { qty: -1 } }, { session: other });
        });
      }
      item.qty -= order.qty;
      try {
        await item.save({ session });
      } catch (error) {
        conflicts.push([error.code, error.hasErrorLabel?.('TransientTransactionError')]);
        throw error;
      }
    });
  } finally {
    await other.endSession();
  }
  assert.equal(attempts, 2);
  assert.deepEqual(conflicts, [[112, true]]);
  assert.equal(await Order.countDocuments({}), 1);
  assert.equal((await Inventory.findById('abc').lean()).qty, 96);
});

// transactionAsyncLocalStorage is a Mongoose-instance option: a separate instance keeps it from
// the checks above.
const withAsyncLocalStorage = new mongoose.Mongoose();
withAsyncLocalStorage.set('transactionAsyncLocalStorage', true);
await check(
  'async_local_storage_joins_operations_to_the_transaction',
  async (connection, { Order, Inventory }) => {
    await connection.transaction(async () => {
      // No `{ session }`: Mongoose passes the transaction's session itself.
      await Order.create([{ sku: 'abc', qty: 1 }]);
      await Inventory.updateOne({ _id: 'abc' }, { $inc: { qty: -1 } });
    });
    assert.equal(await Order.countDocuments({}), 1);
    assert.equal((await Inventory.findById('abc').lean()).qty, 99);
    const thrown = new Error('abort');
    await assert.rejects(
      connection.transaction(async () => {
        await Order.create([{ sku: 'abc', qty: 50 }]);
        await Inventory.updateOne({ _id: 'abc' }, { $inc: { qty: -50 } });
        throw thrown;
      }),
      (error) => error === thrown,
    );
    assert.equal(await Order.countDocuments({}), 1);
    assert.equal((await Inventory.findById('abc').lean()).qty, 99);
  },
  withAsyncLocalStorage,
);

process.exitCode = failed ? 1 : 0;
