'use strict';
// Real-client checks with mongosh (the MongoDB Shell) against a running tideway server.
//
// Usage: node check_mongosh.js PORT
// Environment:
//   MONGOSH_BIN            the mongosh executable (run.sh: target/clients/node/node_modules/.bin/mongosh)
//   TIDEWAY_MONGOSH_HOME   a scratch directory used as mongosh's HOME (config, logs, history)
//
// mongosh runs non-interactively (--eval, or a script on stdin), never reads a user's
// ~/.mongoshrc.js (--norc), and is kept from reaching the network: telemetry is forced off and
// has no endpoint, and the update check has no URL (see mongosh_env.js).
//
// Prints `PASS name` / `FAIL name` (with indented details) / `SKIP name: why` per check and exits
// non-zero if any failed. Each scenario is one function in SCENARIOS.

const { spawnSync } = require('node:child_process');
const fs = require('node:fs');
const path = require('node:path');

const { mongoshEnv } = require('./mongosh_env.js');

const SERVER_VERSION = '8.0.0';
const MARK = 'TIDEWAY-CHECK';

const port = Number(process.argv[2]);
const MONGOSH = process.env.MONGOSH_BIN;
const HOME = process.env.TIDEWAY_MONGOSH_HOME;
if (!Number.isInteger(port) || port <= 0 || !MONGOSH || !HOME) {
  console.error('usage: MONGOSH_BIN=... TIDEWAY_MONGOSH_HOME=... node check_mongosh.js PORT');
  process.exit(2);
}
const URI = `mongodb://127.0.0.1:${port}/test?directConnection=true`;

class Skip extends Error {}

class CheckFailure extends Error {}

const ENV = mongoshEnv(HOME);

function mongosh(args, input = '') {
  const result = spawnSync(MONGOSH, [URI, '--norc', ...args], {
    env: ENV,
    input,
    encoding: 'utf8',
    timeout: 60_000,
  });
  const output = `${result.stdout ?? ''}${result.stderr ?? ''}`;
  const describe = () => [
    `command: mongosh ${[URI, '--norc', ...args].map((a) => JSON.stringify(a)).join(' ')}`,
    input ? `stdin: ${JSON.stringify(input)}` : null,
    `exit status: ${result.status}${result.signal ? ` (signal ${result.signal})` : ''}`,
    result.error ? `spawn error: ${result.error.message}` : null,
    'output:',
    ...output.split('\n').map((l) => `  | ${l}`),
  ].filter((l) => l !== null).join('\n');
  return { ...result, output, describe };
}

function expect(run, condition, what) {
  if (!condition) throw new CheckFailure(`${what}\n${run.describe()}`);
}

function expectSuccess(run) {
  expect(run, !run.error && run.status === 0, 'mongosh did not exit with status 0');
}

function expectGenuine(run) {
  expect(run, !/Non-Genuine/i.test(run.output), 'mongosh printed a "Non-Genuine MongoDB" warning');
}

// A --eval script that throws (so mongosh exits non-zero) unless `condition` holds, then prints `MARK name`.
function evalScript(name, setup, condition, describeActual) {
  return `${setup}
if (!(${condition})) { throw new Error(${JSON.stringify(`${name}: `)} + ${describeActual}); }
print(${JSON.stringify(`${MARK} ${name}`)});`;
}

// --- scenarios ---------------------------------------------------------------------------------

function ping() {
  const script = evalScript('ping', 'const r = db.runCommand({ ping: 1 });', 'r.ok === 1',
    '"server answered " + EJSON.stringify(r) + ", expected ok === 1"');
  const run = mongosh(['--quiet', '--eval', script]);
  expectSuccess(run);
  expect(run, run.stdout.includes(`${MARK} ping`), 'the --eval script did not run to its end');
}

function version() {
  const script = evalScript('version', 'const v = db.version();', `v === ${JSON.stringify(SERVER_VERSION)}`,
    `"db.version() returned " + JSON.stringify(v) + ", expected ${SERVER_VERSION}"`);
  const run = mongosh(['--quiet', '--eval', script]);
  expectSuccess(run);
  expect(run, run.stdout.includes(`${MARK} version`), 'the --eval script did not run to its end');
}

function serverErrorExitStatus() {
  // A command the server rejects must surface as a MongoServerError and a non-zero exit status
  // (this also proves the checks above would notice a failing --eval).
  const run = mongosh(['--quiet', '--eval', 'db.runCommand({ tidewayNoSuchCommand: 1 })']);
  expect(run, !run.error && run.status !== 0 && run.status !== null,
    'mongosh exited 0 although the server rejected the command');
  expect(run, /MongoServerError/.test(run.output) && /tidewayNoSuchCommand/.test(run.output),
    'mongosh did not report the server\'s error for an unknown command');
}

function bannerVerbose() {
  // --eval is quiet by default; --verbose shows what a person sees on connecting: the greeting,
  // the server's startup warnings and, for an emulation, the "Non-Genuine MongoDB" banner.
  const run = mongosh(['--verbose', '--eval', `print(${JSON.stringify(`${MARK} banner`)})`]);
  expectSuccess(run);
  expect(run, run.stdout.includes(`${MARK} banner`), 'the --eval script did not run');
  expect(run, new RegExp(`Using MongoDB:\\s+${SERVER_VERSION.replace(/\./g, '\\.')}`).test(run.output),
    `the greeting does not say "Using MongoDB: ${SERVER_VERSION}"`);
  expectGenuine(run);
}

function interactivePrompt() {
  // Interactive mode with commands on stdin: the normal greeting, a `test>` prompt, the answer.
  const run = mongosh([], 'db.runCommand({ ping: 1 })\n');
  expectSuccess(run);
  expect(run, run.output.includes('test> '), 'no "test> " prompt in interactive mode');
  expect(run, /\{\s*ok: 1\s*\}/.test(run.output), 'the ping at the prompt did not print { ok: 1 }');
  expect(run, new RegExp(`Using MongoDB:\\s+${SERVER_VERSION.replace(/\./g, '\\.')}`).test(run.output),
    `the greeting does not say "Using MongoDB: ${SERVER_VERSION}"`);
  expectGenuine(run);
}

function genuineInLog() {
  // mongosh records its server classification in its own log ("is_genuine"); it must never be false.
  const logDir = path.join(HOME, '.mongodb', 'mongosh');
  const logs = fs.existsSync(logDir) ? fs.readdirSync(logDir).filter((f) => f.endsWith('_log')) : [];
  const text = logs.map((f) => fs.readFileSync(path.join(logDir, f), 'utf8')).join('\n');
  const verdicts = [...text.matchAll(/"is_genuine":(true|false),"non_genuine_server_name":"([^"]*)"/g)];
  if (verdicts.length === 0) throw new Skip(`no "is_genuine" entry in mongosh's logs under ${logDir}`);
  const bad = verdicts.filter((m) => m[1] !== 'true');
  if (bad.length) {
    throw new CheckFailure(`mongosh classified the server as non-genuine: ${bad.map((m) => m[0]).join(', ')}`);
  }
}

// --- CRUD in db `shop` ---------------------------------------------------------------------------

// Prepended to the CRUD --eval scripts: check() throws (so mongosh exits non-zero and prints the
// difference) unless the server's answer is exactly the expected one; step() marks progress.
const SHELL_HELPERS = `
function show(value) { return EJSON.stringify(value); }
function check(what, actual, expected) {
  if (show(actual) !== show(expected)) {
    throw new Error(what + ': server answered ' + show(actual) + ', expected ' + show(expected));
  }
}
function step(name) { print(${JSON.stringify(MARK)} + ' ' + name); }
`;

// Runs `body` as an --eval script against db `shop`, which is dropped before and after (also when
// `body` throws), and expects every step in `steps` to be reached.
function shopScript(body, steps) {
  const script = `${SHELL_HELPERS}
db = db.getSiblingDB('shop');
db.dropDatabase();
try {
${body}
} finally {
  db.dropDatabase();
}`;
  const run = mongosh(['--quiet', '--eval', script]);
  expectSuccess(run);
  for (const name of steps) {
    expect(run, run.stdout.includes(`${MARK} ${name}\n`), `the --eval script did not reach step "${name}"`);
  }
  expectGenuine(run);
}

function crudShop() {
  shopScript(`
  let r = db.c.insertOne({ _id: 1, a: 1 });
  check('insertOne({_id: 1, a: 1})', [r.acknowledged, r.insertedId], [true, 1]);
  step('insertOne');
  r = db.c.insertMany([{ _id: 2, a: 2 }, { _id: 3, a: 3 }, { _id: 4, a: 0 }]);
  check('insertMany: insertedIds', r.insertedIds, { 0: 2, 1: 3, 2: 4 });
  step('insertMany');
  check('find({a: {$gte: 1}}).sort({a: -1}).toArray()', db.c.find({ a: { $gte: 1 } }).sort({ a: -1 }).toArray(),
    [{ _id: 3, a: 3 }, { _id: 2, a: 2 }, { _id: 1, a: 1 }]);
  check('find({}, {_id: 0}).sort({a: 1}).skip(1).limit(2).toArray()',
    db.c.find({}, { _id: 0 }).sort({ a: 1 }).skip(1).limit(2).toArray(), [{ a: 1 }, { a: 2 }]);
  step('find');
  r = db.c.updateOne({ _id: 1 }, { $set: { b: 2 } });
  check('updateOne({_id: 1}, {$set: {b: 2}}): matchedCount, modifiedCount', [r.matchedCount, r.modifiedCount], [1, 1]);
  check('document after updateOne', db.c.findOne({ _id: 1 }), { _id: 1, a: 1, b: 2 });
  step('updateOne');
  r = db.c.deleteMany({ a: { $gt: 1 } });
  check('deleteMany({a: {$gt: 1}}): deletedCount', r.deletedCount, 2);
  check('documents after deleteMany', db.c.find().sort({ _id: 1 }).toArray(),
    [{ _id: 1, a: 1, b: 2 }, { _id: 4, a: 0 }]);
  check('estimatedDocumentCount() after deleteMany', db.c.estimatedDocumentCount(), 2);
  step('deleteMany');
  db.c.updateOne({ _id: 4 }, [{ $set: { tags: [1, 5, 9], a: { $add: ['$a', 10] } } }]);
  db.c.updateOne({ _id: 4 }, { $inc: { 'tags.$[big]': 100 } }, { arrayFilters: [{ big: { $gte: 5 } }] });
  check('pipeline update, then arrayFilters', db.c.findOne({ _id: 4 }), { _id: 4, a: 10, tags: [1, 105, 109] });
  check('$expr and positional projection', db.c.find({ $expr: { $gt: ['$a', 5] }, tags: { $gt: 100 } }, { 'tags.$': 1 }).toArray(),
    [{ _id: 4, tags: [105] }]);
  db.createCollection('people', { collation: { locale: 'en', strength: 2 } });
  db.people.insertMany([{ _id: 1, name: 'Ann' }, { _id: 2, name: 'bob' }, { _id: 3, name: 'ann' }]);
  check('collection default collation', db.people.find({ name: 'ANN' }).sort({ _id: 1 }).toArray().map((d) => d._id), [1, 3]);
  check('countDocuments with the simple collation', db.people.countDocuments({ name: 'ANN' }, { collation: { locale: 'simple' } }), 0);
  check('find().collation().sort()', db.people.find().collation({ locale: 'en' }).sort({ name: 1, _id: 1 }).toArray().map((d) => d._id), [3, 1, 2]);
  db.people.drop();
  const bulk = db.getMongo().bulkWrite([
    { namespace: 'shop.c', name: 'insertOne', document: { _id: 50, a: 1 } },
    { namespace: 'shop.c', name: 'updateOne', filter: { _id: 50 }, update: { $inc: { a: 1 } } },
    { namespace: 'shop.c', name: 'deleteOne', filter: { _id: 50 } },
  ]);
  check('Mongo.bulkWrite counts', [bulk.insertedCount, bulk.modifiedCount, bulk.deletedCount], [1, 1, 1]);
  check('aggregate with let', db.c.aggregate([{ $match: { $expr: { $eq: ['$_id', '$$id'] } } }, { $project: { a: 1 } }], { let: { id: 4 } }).toArray(),
    [{ _id: 4, a: 10 }]);
  step('language');
  check('db.getCollectionNames()', db.getCollectionNames(), ['c']);
  check('dropDatabase().ok', db.dropDatabase().ok, 1);
  const names = db.adminCommand({ listDatabases: 1, nameOnly: true }).databases.map((d) => d.name);
  if (names.includes('shop')) throw new Error('listDatabases still has shop after dropDatabase: ' + show(names));
  step('dropDatabase');`, ['insertOne', 'insertMany', 'find', 'updateOne', 'deleteMany', 'language', 'dropDatabase']);
}

// The shell helpers over server-side JavaScript and the newer pipeline stages: the manual's
// mapReduce orders example (total price per customer), $where, $function, $setWindowFields.
function scriptingAndPipelinesShop() {
  shopScript(`
  const prices = [['Ant O. Knee', 25], ['Ant O. Knee', 70], ['Busby Bee', 50], ['Busby Bee', 25],
    ['Busby Bee', 50], ['Cam Elot', 35], ['Cam Elot', 25], ['Don Quis', 75], ['Don Quis', 55],
    ['Don Quis', 25]];
  db.orders.insertMany(prices.map(([cust, price], i) => ({ _id: i + 1, cust_id: cust, price: price, status: 'A' })));
  const mr = db.orders.mapReduce(function () { emit(this.cust_id, this.price); },
    function (key, values) { return Array.sum(values); }, { out: { inline: 1 } });
  check('mapReduce inline results', mr.results,
    [{ _id: 'Ant O. Knee', value: 95 }, { _id: 'Busby Bee', value: 125 }, { _id: 'Cam Elot', value: 60 },
      { _id: 'Don Quis', value: 155 }]);
  step('mapReduce');
  check('$where', db.orders.find({ $where: 'this.price > 60' }).sort({ _id: 1 }).toArray().map((d) => d._id), [2, 8]);
  check('$function', db.orders.aggregate([{ $match: { _id: 1 } },
    { $project: { _id: 0, twice: { $function: { body: 'function(p) { return p * 2; }', args: ['$price'], lang: 'js' } } } }]).toArray(),
    [{ twice: 50 }]);
  step('javascript');
  check('$setWindowFields running total', db.orders.aggregate([{ $match: { cust_id: 'Cam Elot' } },
    { $setWindowFields: { sortBy: { _id: 1 }, output: { total: { $sum: '$price', window: { documents: ['unbounded', 'current'] } } } } },
    { $project: { _id: 0, total: 1 } }]).toArray(), [{ total: 35 }, { total: 60 }]);
  step('windows');`, ['mapReduce', 'javascript', 'windows']);
}

function uniqueIndexShop() {
  shopScript(`
  db.c.insertMany([{ _id: 1, a: 1 }, { _id: 2, a: 2 }]);
  check('createIndex({a: 1}, {unique: true})', db.c.createIndex({ a: 1 }, { unique: true }), 'a_1');
  const index = db.c.getIndexes().find((i) => i.name === 'a_1');
  check('getIndexes(): a_1 key and unique', index && [index.key, index.unique], [{ a: 1 }, true]);
  step('createIndex');
  let error = null;
  try {
    db.c.insertOne({ _id: 3, a: 1 });
  } catch (e) {
    error = e;
  }
  if (!error) throw new Error('insertOne({_id: 3, a: 1}) succeeded despite the unique index on a');
  check('duplicate insert: error name and code', [error.name, error.code], ['MongoServerError', 11000]);
  check('duplicate insert: message', error.message,
    'E11000 duplicate key error collection: shop.c index: a_1 dup key: { a: 1 }');
  check('documents after the rejected insert', db.c.find().sort({ _id: 1 }).toArray(),
    [{ _id: 1, a: 1 }, { _id: 2, a: 2 }]);
  step('duplicate');
  const plan = db.c.find({ a: { $gte: 1, $lt: 2 } }).explain('executionStats');
  const scan = plan.queryPlanner.winningPlan.inputStage;
  check('find({a: {$gte: 1, $lt: 2}}).explain("executionStats"): stages, index, bounds',
    [plan.queryPlanner.winningPlan.stage, scan.stage, scan.indexName, scan.indexBounds],
    ['FETCH', 'IXSCAN', 'a_1', { a: ['[1, 2)'] }]);
  check('explain("executionStats"): nReturned, totalKeysExamined, totalDocsExamined',
    [plan.executionStats.nReturned, plan.executionStats.totalKeysExamined, plan.executionStats.totalDocsExamined],
    [1, 1, 1]);
  const covered = db.c.find({ a: { $gte: 1, $lt: 3 } }, { a: 1, _id: 0 }).explain('executionStats');
  check('covered find().explain(): PROJECTION_COVERED over IXSCAN, no document read',
    [covered.queryPlanner.winningPlan.stage, covered.queryPlanner.winningPlan.inputStage.stage,
      covered.executionStats.totalDocsExamined],
    ['PROJECTION_COVERED', 'IXSCAN', 0]);
  step('explain');`, ['createIndex', 'duplicate', 'explain']);
}

function showDbsCollections() {
  // `show dbs` / `show collections` are shell helpers: run them at the interactive prompt, with a
  // printed mark before each so their output can be told apart.
  const section = (name) => `print(${JSON.stringify(`${MARK} ${name}`)})\n`;
  const input = [
    'use shop\n',
    'db.dropDatabase()\n',
    'db.c.insertOne({ _id: 1, a: 1 })\n',
    'db.d.insertOne({ _id: 1 })\n',
    section('show-dbs'), 'show dbs\n',
    section('show-collections'), 'show collections\n',
    section('drop'), 'db.dropDatabase()\n',
    section('show-dbs-after-drop'), 'show dbs\n',
    section('end'),
  ].join('');
  const run = mongosh([], input);
  expectSuccess(run);
  expectGenuine(run);
  // The lines printed between one mark and the next, without the `shop> ` prompts.
  const between = (from, to) => {
    const start = run.output.indexOf(`${MARK} ${from}\n`);
    const end = run.output.indexOf(`${MARK} ${to}\n`);
    expect(run, start >= 0 && end > start, `no output between the marks "${from}" and "${to}"`);
    return run.output.slice(start, end).split('\n').slice(1)
      .map((line) => line.replace(/^(\w+> )+/, '').trim()).filter((line) => line !== '');
  };
  const dbs = between('show-dbs', 'show-collections');
  expect(run, dbs.some((line) => /^shop\s+\d/.test(line)),
    `"show dbs" did not list shop with its size: ${JSON.stringify(dbs)}`);
  const collections = between('show-collections', 'drop');
  expect(run, JSON.stringify(collections) === JSON.stringify(['c', 'd']),
    `"show collections" printed ${JSON.stringify(collections)}, expected ["c","d"]`);
  const after = between('show-dbs-after-drop', 'end');
  expect(run, !after.some((line) => /^shop\s/.test(line)),
    `"show dbs" still lists shop after dropDatabase: ${JSON.stringify(after)}`);
}

const SCENARIOS = [
  ['ping', ping],
  ['version', version],
  ['server_error_exit_status', serverErrorExitStatus],
  ['banner_verbose', bannerVerbose],
  ['interactive_prompt', interactivePrompt],
  ['crud_shop', crudShop],
  ['unique_index_shop', uniqueIndexShop],
  ['scripting_and_pipelines_shop', scriptingAndPipelinesShop],
  ['show_dbs_collections', showDbsCollections],
  ['genuine_in_log', genuineInLog], // after the runs above, which write the logs
];

// --- runner ------------------------------------------------------------------------------------

let failed = 0;
for (const [scenarioName, fn] of SCENARIOS) {
  const name = `mongosh/${scenarioName}`;
  try {
    fn();
    console.log(`PASS ${name}`);
  } catch (err) {
    if (err instanceof Skip) {
      console.log(`SKIP ${name}: ${err.message}`);
      continue;
    }
    failed++;
    console.log(`FAIL ${name}`);
    const text = err instanceof CheckFailure ? err.message : (err?.stack ?? String(err));
    for (const line of text.split('\n')) console.log(`    ${line}`);
  }
}
process.exitCode = failed ? 1 : 0;
