// Real-client checks with the Node.js `mongodb` driver against a running tideway server.
//
// Usage: node check_node.mjs PORT
// The driver is loaded from $TIDEWAY_CLIENTS_NODE_DIR/node_modules (run.sh installs it into
// target/clients/node); without that variable, from the usual Node resolution.
//
// Prints `PASS name` / `FAIL name` (with indented details) / `SKIP name: why` per check and
// exits non-zero if any failed. Each scenario is one async function in SCENARIOS, taking the
// context { port, client, compressor }; scenarios run once per configuration in CONFIGS.

import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import path from 'node:path';

const require = createRequire(
  process.env.TIDEWAY_CLIENTS_NODE_DIR
    ? path.join(process.env.TIDEWAY_CLIENTS_NODE_DIR, 'package.json')
    : import.meta.url,
);
const { MongoClient, MongoServerError } = require('mongodb');

const SERVER_VERSION = '7.0.0';
const MAX_WIRE_VERSION = 21;

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

const SCENARIOS = [
  ['ping', ping],
  ['buildInfo', buildInfo],
  ['hello', hello],
  ['unknown_command', unknownCommand],
  ['compression', compressionUsed],
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
  const ctx = { port, client, compressor };
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
