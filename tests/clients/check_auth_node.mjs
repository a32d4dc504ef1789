// Authentication, authorization and TLS checks with the Node.js `mongodb` driver against a fresh
// tideway server.
//
// Usage: node check_auth_node.mjs PORT TLS_DIR
// The driver is loaded from $TIDEWAY_CLIENTS_NODE_DIR/node_modules (as check_node.mjs does).
//
// The server (tests/clients/run.sh) runs with --auth and --tlsMode requireTLS, certificates from
// the test CA in TLS_DIR (make_certs.py), --tlsCAFile and --tlsAllowConnectionsWithoutCertificates,
// and has no user yet: the first checks use the localhost exception, so the checks run once, in
// order, each building on the users the earlier ones made. The same sequence as
// check_auth_pymongo.py, whose docstring gives the sources of the expected codes.
//
// Prints `PASS name` / `FAIL name` (with indented details) per check; exits non-zero if any failed.

import assert from 'node:assert/strict';
import fs from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import { inspect } from 'node:util';

const require = createRequire(
  process.env.TIDEWAY_CLIENTS_NODE_DIR
    ? path.join(process.env.TIDEWAY_CLIENTS_NODE_DIR, 'package.json')
    : import.meta.url,
);
const { MongoClient, MongoServerError, MongoServerSelectionError } = require('mongodb');

const port = Number(process.argv[2]);
const tlsDir = process.argv[3];
if (!Number.isInteger(port) || port <= 0 || !tlsDir) {
  console.error('usage: node check_auth_node.mjs PORT TLS_DIR');
  process.exit(2);
}
const CA = path.join(tlsDir, 'ca.pem');
const CLIENT_PEM = path.join(tlsDir, 'client.pem');
const CLIENT_SUBJECT = fs.readFileSync(path.join(tlsDir, 'client_subject'), 'utf8').trim();

const ADMIN = { username: 'admin', password: 'admin-pw' };
const PASSWORD = 'user-pw';
const USERS = {
  scram256: { mechanisms: ['SCRAM-SHA-256'], roles: [{ role: 'read', db: 'authA' }] },
  scram1: { mechanisms: ['SCRAM-SHA-1'], roles: [{ role: 'read', db: 'authA' }] },
  reader: { mechanisms: ['SCRAM-SHA-256', 'SCRAM-SHA-1'], roles: [{ role: 'read', db: 'authA' }] },
  writerA: { mechanisms: ['SCRAM-SHA-256', 'SCRAM-SHA-1'], roles: [{ role: 'readWrite', db: 'authA' }] },
};
const UNAUTHORIZED = 13;
const AUTHENTICATION_FAILED = 18;
// mongod's messages (src/mongo/db/commands.cpp; "command" is capitalised in newer versions).
const unauthenticated = (command) => new RegExp(`^command ${command} requires authentication`, 'i');
const notAuthorized = (db) => new RegExp(`^not authorized on ${db} to execute command `);

/** A connected client; `tls: false` for a plain one, `ca: false` to leave the test CA out. */
async function connect({ tls = true, ca = true, ...options } = {}) {
  const settings = { directConnection: true, serverSelectionTimeoutMS: 3000, ...options };
  if (tls) {
    settings.tls = true;
    if (ca) settings.tlsCAFile = CA;
  }
  const client = new MongoClient(`mongodb://127.0.0.1:${port}/`, settings);
  await client.connect();
  return client;
}

function asUser(username, password = PASSWORD, options = {}) {
  return connect({ auth: { username, password }, authSource: 'admin', ...options });
}

const asAdmin = () => asUser(ADMIN.username, ADMIN.password, { authMechanism: 'SCRAM-SHA-256' });

async function withClient(open, body) {
  const client = await open();
  try {
    return await body(client);
  } finally {
    await client.close();
  }
}

/** `promise` must fail with the server's `code`/`codeName` and, if given, a message matching `message`. */
async function expectError(what, promise, code, codeName, message = null) {
  let result;
  try {
    result = await promise;
  } catch (error) {
    assert.ok(
      error instanceof MongoServerError && error.code === code && error.codeName === codeName,
      `${what}: failed with ${error?.name} ${error?.code} ${error?.codeName} (${error?.message}), expected ${code} ${codeName}`,
    );
    if (message) assert.match(error.message, message, `${what}: the message is not mongod's`);
    return error;
  }
  assert.fail(`${what}: succeeded (${inspect(result)}), expected error ${code} ${codeName}`);
}

async function authenticatedUsers(client) {
  const status = await client.db('admin').command({ connectionStatus: 1 });
  return (status.authInfo?.authenticatedUsers ?? []).map(({ user, db }) => ({ user, db }));
}

async function expectTlsRefused(what, options, pattern) {
  let client;
  try {
    client = await connect({ serverSelectionTimeoutMS: 1000, ...options });
  } catch (error) {
    assert.ok(error instanceof MongoServerSelectionError, `${what}: ${error?.name}: ${error?.message}`);
    assert.match(error.message, pattern, `${what}: refused, but not for ${pattern}`);
    return;
  }
  await client.close();
  assert.fail(`${what}: the connection succeeded`);
}

const CHECKS = {
  // --- TLS
  async tls_plain_connection_refused() {
    await expectTlsRefused('plain connection', { tls: false }, /./);
  },
  async tls_untrusted_without_ca_file() {
    // Without tlsCAFile Node's bundled roots are used, which do not hold the test CA.
    await expectTlsRefused('tls without the test CA', { ca: false }, /certificate/i);
  },
  async tls_connect_with_ca_file() {
    await withClient(connect, async (client) => {
      const reply = await client.db('admin').command({ ping: 1 }); // needs no authentication
      assert.equal(reply.ok, 1);
    });
  },

  // --- localhost exception
  async localhost_exception_creates_first_user() {
    await withClient(connect, async (client) => {
      const reply = await client.db('admin').command({
        createUser: ADMIN.username, pwd: ADMIN.password, roles: [{ role: 'root', db: 'admin' }],
      });
      assert.equal(reply.ok, 1);
    });
  },
  async localhost_exception_closed_after_first_user() {
    await withClient(connect, async (client) => {
      await expectError('unauthenticated find', client.db('authA').collection('items').findOne(), UNAUTHORIZED, 'Unauthorized', unauthenticated('find'));
      await expectError('unauthenticated listDatabases', client.db('admin').command({ listDatabases: 1 }), UNAUTHORIZED, 'Unauthorized', unauthenticated('listDatabases'));
      await expectError(
        'unauthenticated second createUser',
        client.db('admin').command({ createUser: 'intruder', pwd: 'x', roles: [] }),
        UNAUTHORIZED,
        'Unauthorized',
        unauthenticated('createUser'),
      );
    });
  },

  // --- SCRAM
  async admin_creates_users() {
    await withClient(asAdmin, async (admin) => {
      assert.deepEqual(await authenticatedUsers(admin), [{ user: ADMIN.username, db: 'admin' }]);
      for (const [name, { mechanisms, roles }] of Object.entries(USERS)) {
        await admin.db('admin').command({ createUser: name, pwd: PASSWORD, roles, mechanisms });
      }
      await admin.db('authA').collection('items').insertOne({ _id: 1, db: 'authA' });
      await admin.db('authB').collection('items').insertOne({ _id: 1, db: 'authB' });
    });
  },
  async scram_sha_256_authenticates() {
    await expectScram('scram256', 'SCRAM-SHA-256');
  },
  async scram_sha_1_authenticates() {
    await expectScram('scram1', 'SCRAM-SHA-1');
  },
  async wrong_password_scram_sha_256_is_18() {
    await expectWrongPassword('scram256', 'SCRAM-SHA-256');
  },
  async wrong_password_scram_sha_1_is_18() {
    await expectWrongPassword('scram1', 'SCRAM-SHA-1');
  },

  // --- authorization
  async read_role_finds_but_cannot_insert() {
    await withClient(() => asUser('reader'), async (client) => {
      const items = client.db('authA').collection('items');
      assert.deepEqual(await items.findOne({ _id: 1 }), { _id: 1, db: 'authA' });
      await expectError('insert as a read user', items.insertOne({ _id: 2 }), UNAUTHORIZED, 'Unauthorized', notAuthorized('authA'));
    });
  },
  async read_write_role_is_limited_to_its_database() {
    await withClient(() => asUser('writerA'), async (client) => {
      await client.db('authA').collection('items').insertOne({ _id: 'writerA' });
      assert.deepEqual(await client.db('authA').collection('items').findOne({ _id: 'writerA' }), { _id: 'writerA' });
      const other = client.db('authB').collection('items');
      await expectError('find on authB as a readWrite@authA user', other.findOne(), UNAUTHORIZED, 'Unauthorized', notAuthorized('authB'));
      await expectError('insert on authB as a readWrite@authA user', other.insertOne({ _id: 'writerA' }), UNAUTHORIZED, 'Unauthorized', notAuthorized('authB'));
    });
  },

  // --- MONGODB-X509
  async x509_user_created_in_external() {
    await withClient(asAdmin, async (admin) => {
      const reply = await admin.db('$external').command({
        createUser: CLIENT_SUBJECT, roles: [{ role: 'readWrite', db: 'authA' }],
      });
      assert.equal(reply.ok, 1);
    });
  },
  async x509_client_certificate_authenticates() {
    const open = () => connect({ tlsCertificateKeyFile: CLIENT_PEM, authMechanism: 'MONGODB-X509' });
    await withClient(open, async (client) => {
      assert.deepEqual(await authenticatedUsers(client), [{ user: CLIENT_SUBJECT, db: '$external' }]);
      await client.db('authA').collection('items').insertOne({ _id: 'x509' });
      await expectError('find on authB as the x509 user', client.db('authB').collection('items').findOne(), UNAUTHORIZED, 'Unauthorized', notAuthorized('authB'));
    });
  },
};

async function expectScram(user, mechanism) {
  await withClient(() => asUser(user, PASSWORD, { authMechanism: mechanism }), async (client) => {
    assert.deepEqual(await authenticatedUsers(client), [{ user, db: 'admin' }]);
    assert.deepEqual(await client.db('authA').collection('items').findOne({ _id: 1 }), { _id: 1, db: 'authA' });
  });
}

async function expectWrongPassword(user, mechanism) {
  // The driver authenticates while connecting, so connect() itself is refused.
  await expectError(
    `${mechanism} with a wrong password`,
    asUser(user, 'wrong-pw', { authMechanism: mechanism }).then(async (client) => {
      await client.close();
      return 'connected';
    }),
    AUTHENTICATION_FAILED,
    'AuthenticationFailed',
    /^Authentication failed\.$/,
  );
}

let failed = 0;
for (const [name, check] of Object.entries(CHECKS)) {
  try {
    await check();
    console.log(`PASS node-auth/${name}`);
  } catch (error) {
    failed += 1;
    console.log(`FAIL node-auth/${name}`);
    const text = error instanceof assert.AssertionError ? error.message : `${error?.name}: ${error?.message}`;
    for (const line of text.split('\n')) console.log(`    ${line}`);
  }
}
process.exit(failed ? 1 : 0);
