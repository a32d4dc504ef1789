'use strict';
// Authentication, authorization and TLS checks with mongosh against a fresh tideway server, using
// mongosh's own command-line options (--tls --tlsCAFile --tlsCertificateKeyFile, -u -p
// --authenticationDatabase --authenticationMechanism).
//
// Usage: node check_auth_mongosh.js PORT TLS_DIR
// Environment:
//   MONGOSH_BIN            the mongosh executable
//   TIDEWAY_MONGOSH_HOME   a scratch directory used as mongosh's HOME (see mongosh_env.js)
//
// The server (tests/clients/run.sh) runs with --auth and --tlsMode requireTLS, certificates from
// the test CA in TLS_DIR (make_certs.py), --tlsCAFile and --tlsAllowConnectionsWithoutCertificates,
// and has no user yet. The checks are check_auth_pymongo.py's (whose docstring gives the sources
// of the expected codes), in the same order; each mongosh run's --eval script tries its steps,
// catching errors, and prints their outcomes as one EJSON line after MARK, judged here.
//
// Prints `PASS name` / `FAIL name` (with indented details) per check; exits non-zero if any failed.

const { spawnSync } = require('node:child_process');
const fs = require('node:fs');
const path = require('node:path');
const { isDeepStrictEqual, inspect } = require('node:util');

const { mongoshEnv } = require('./mongosh_env.js');

const MARK = 'TIDEWAY-AUTH-OUTCOMES';
const port = Number(process.argv[2]);
const tlsDir = process.argv[3];
const MONGOSH = process.env.MONGOSH_BIN;
const HOME = process.env.TIDEWAY_MONGOSH_HOME;
if (!Number.isInteger(port) || port <= 0 || !tlsDir || !MONGOSH || !HOME) {
  console.error('usage: MONGOSH_BIN=... TIDEWAY_MONGOSH_HOME=... node check_auth_mongosh.js PORT TLS_DIR');
  process.exit(2);
}
const URI = `mongodb://127.0.0.1:${port}/test?directConnection=true&serverSelectionTimeoutMS=2000`;
const CA = path.join(tlsDir, 'ca.pem');
const CLIENT_PEM = path.join(tlsDir, 'client.pem');
const CLIENT_SUBJECT = fs.readFileSync(path.join(tlsDir, 'client_subject'), 'utf8').trim();
const ENV = mongoshEnv(HOME);

const ADMIN = ['admin', 'admin-pw'];
const PASSWORD = 'user-pw';
const TLS = ['--tls', '--tlsCAFile', CA];
const UNAUTHORIZED = { code: 13, codeName: 'Unauthorized' };
const AUTHENTICATION_FAILED = { code: 18, codeName: 'AuthenticationFailed', message: /^Authentication failed\.$/ };
// mongod's messages (src/mongo/db/commands.cpp; "command" is capitalised in newer versions).
const unauthenticated = (command) => ({
  ...UNAUTHORIZED, message: new RegExp(`^command ${command} requires authentication`, 'i'),
});
const notAuthorized = (db) => ({ ...UNAUTHORIZED, message: new RegExp(`^not authorized on ${db} to execute command `) });

class CheckFailure extends Error {}

/** Runs mongosh with `args` and, if given, an --eval script of `steps` (see outcomesScript). */
function mongosh(args, steps = null) {
  const argv = [URI, '--norc', '--quiet', ...args];
  if (steps) argv.push('--eval', outcomesScript(steps));
  const result = spawnSync(MONGOSH, argv, { env: ENV, encoding: 'utf8', timeout: 60_000 });
  const output = `${result.stdout ?? ''}${result.stderr ?? ''}`;
  const describe = () => [
    `command: mongosh ${argv.slice(0, steps ? -2 : undefined).map((a) => JSON.stringify(a)).join(' ')}${steps ? ' --eval <script>' : ''}`,
    `exit status: ${result.status}${result.signal ? ` (signal ${result.signal})` : ''}`,
    result.error ? `spawn error: ${result.error.message}` : null,
    'output:',
    ...output.trimEnd().split('\n').map((l) => `  | ${l}`),
  ].filter((l) => l !== null).join('\n');
  const line = (result.stdout ?? '').split('\n').find((l) => l.startsWith(`${MARK} `));
  const outcomes = line ? JSON.parse(line.slice(MARK.length + 1)) : null;
  return { ...result, output, describe, outcomes };
}

// An --eval script that runs each step (a JS expression, by name) and prints all their outcomes:
// { value } or { error: { code, codeName, message } }. A command answer with ok: 0 counts as an
// error too (mongosh throws for most, but not every helper does).
function outcomesScript(steps) {
  const body = Object.entries(steps)
    .map(([name, expr]) => `outcomes[${JSON.stringify(name)}] = attempt(() => (${expr}));`)
    .join('\n');
  return `
const outcomes = {};
function attempt(run) {
  try {
    const value = run();
    if (value && value.ok === 0) return { error: { code: value.code, codeName: value.codeName, message: value.errmsg } };
    return { value };
  } catch (e) {
    return { error: { code: e.code, codeName: e.codeName, message: e.message } };
  }
}
${body}
print(${JSON.stringify(MARK)} + ' ' + EJSON.stringify(outcomes, { relaxed: true }));`;
}

function fail(run, what) {
  throw new CheckFailure(`${what}\n${run.describe()}`);
}

function outcome(run, step) {
  if (!run.outcomes) fail(run, 'the --eval script did not print its outcomes');
  return run.outcomes[step];
}

function expectValue(run, step, expected) {
  const got = outcome(run, step);
  if (!got || 'error' in got) fail(run, `${step}: failed with ${inspect(got?.error)}, expected success`);
  if (expected !== undefined && !isDeepStrictEqual(got.value, expected)) {
    fail(run, `${step}: answered ${inspect(got.value)}, expected ${inspect(expected)}`);
  }
}

function expectError(run, step, { code, codeName, message = null }) {
  const got = outcome(run, step);
  if (!got || !('error' in got)) fail(run, `${step}: succeeded (${inspect(got?.value)}), expected error ${code} ${codeName}`);
  if (got.error.code !== code || got.error.codeName !== codeName) {
    fail(run, `${step}: failed with ${inspect(got.error)}, expected ${code} ${codeName}`);
  }
  if (message && !message.test(got.error.message ?? '')) {
    fail(run, `${step}: the message ${JSON.stringify(got.error.message)} does not match mongod's ${message}`);
  }
}

function expectRefused(run, pattern, what) {
  if (run.error || run.status === 0) fail(run, `${what}: mongosh exited 0, expected it to be refused`);
  if (!pattern.test(run.output)) fail(run, `${what}: refused, but the output does not match ${pattern}`);
}

const asUser = (user, password, mechanism) => [
  ...TLS, '-u', user, '-p', password, '--authenticationDatabase', 'admin', '--authenticationMechanism', mechanism,
];
const USERS_JSON = (status) => `${status}.authInfo.authenticatedUsers.map((u) => ({ user: u.user, db: u.db }))`;

// The runs, in order: later ones use the users earlier ones created. Each run backs one or more
// named checks.
let localRun;
let adminRun;
const CHECKS = [
  ['tls_plain_connection_refused', () => {
    expectRefused(mongosh(['--eval', 'print(1)']), /./, 'a plain connection to a requireTLS server');
  }],
  ['tls_untrusted_without_ca_file', () => {
    // Without --tlsCAFile the system and bundled roots are used, which do not hold the test CA.
    expectRefused(mongosh(['--tls', '--eval', 'print(1)']), /certificate/i, 'TLS without the test CA');
  }],
  ['tls_connect_with_ca_file', () => {
    localRun = mongosh(TLS, {
      ping: "db.adminCommand({ ping: 1 }).ok",
      createFirstUser: `db.getSiblingDB('admin').runCommand({ createUser: ${JSON.stringify(ADMIN[0])}, pwd: ${JSON.stringify(ADMIN[1])}, roles: [{ role: 'root', db: 'admin' }] }).ok`,
      findUnauthenticated: "db.getSiblingDB('authA').items.findOne()",
      listDatabasesUnauthenticated: 'db.adminCommand({ listDatabases: 1 })',
      createUserUnauthenticated: "db.getSiblingDB('admin').runCommand({ createUser: 'intruder', pwd: 'x', roles: [] })",
      wrongPasswordInShell: `db.getSiblingDB('admin').auth({ user: ${JSON.stringify(ADMIN[0])}, pwd: 'wrong-pw', mechanism: 'SCRAM-SHA-1' })`,
    });
    expectValue(localRun, 'ping', 1);
  }],
  ['localhost_exception_creates_first_user', () => expectValue(localRun, 'createFirstUser', 1)],
  ['localhost_exception_closed_after_first_user', () => {
    expectError(localRun, 'findUnauthenticated', unauthenticated('find'));
    expectError(localRun, 'listDatabasesUnauthenticated', unauthenticated('listDatabases'));
    expectError(localRun, 'createUserUnauthenticated', unauthenticated('createUser'));
  }],
  ['admin_creates_users', () => {
    const createUser = (name, mechanisms, role) => `db.getSiblingDB('admin').runCommand({ createUser: '${name}', pwd: '${PASSWORD}', mechanisms: ${JSON.stringify(mechanisms)}, roles: [{ role: '${role}', db: 'authA' }] }).ok`;
    adminRun = mongosh(asUser(...ADMIN, 'SCRAM-SHA-256'), {
      users: USERS_JSON("db.adminCommand({ connectionStatus: 1 })"),
      scram256: createUser('scram256', ['SCRAM-SHA-256'], 'read'),
      scram1: createUser('scram1', ['SCRAM-SHA-1'], 'read'),
      reader: createUser('reader', ['SCRAM-SHA-256', 'SCRAM-SHA-1'], 'read'),
      writerA: createUser('writerA', ['SCRAM-SHA-256', 'SCRAM-SHA-1'], 'readWrite'),
      seedA: "db.getSiblingDB('authA').items.insertOne({ _id: 1, db: 'authA' }).acknowledged",
      seedB: "db.getSiblingDB('authB').items.insertOne({ _id: 1, db: 'authB' }).acknowledged",
      x509User: `db.getSiblingDB('$external').runCommand({ createUser: ${JSON.stringify(CLIENT_SUBJECT)}, roles: [{ role: 'readWrite', db: 'authA' }] }).ok`,
    });
    expectValue(adminRun, 'users', [{ user: ADMIN[0], db: 'admin' }]);
    for (const step of ['scram256', 'scram1', 'reader', 'writerA']) expectValue(adminRun, step, 1);
    expectValue(adminRun, 'seedA', true);
    expectValue(adminRun, 'seedB', true);
  }],
  ['scram_sha_256_authenticates', () => expectScram('scram256', 'SCRAM-SHA-256')],
  ['scram_sha_1_authenticates', () => expectScram('scram1', 'SCRAM-SHA-1')],
  ['wrong_password_is_refused', () => {
    // mongosh reports the server's error by class and message, without its code...
    const run = mongosh([...asUser('scram256', 'wrong-pw', 'SCRAM-SHA-256'), '--eval', 'print(1)']);
    expectRefused(run, /MongoServerError: Authentication failed/, 'SCRAM-SHA-256 with a wrong password');
  }],
  ['wrong_password_in_shell_is_18', () => {
    // ...which db.auth() in the shell shows.
    expectError(localRun, 'wrongPasswordInShell', AUTHENTICATION_FAILED);
  }],
  ['read_role_finds_but_cannot_insert', () => {
    const run = mongosh(asUser('reader', PASSWORD, 'SCRAM-SHA-256'), {
      find: "db.getSiblingDB('authA').items.findOne({ _id: 1 })",
      insert: "db.getSiblingDB('authA').items.insertOne({ _id: 2 })",
    });
    expectValue(run, 'find', { _id: 1, db: 'authA' });
    expectError(run, 'insert', notAuthorized('authA'));
  }],
  ['read_write_role_is_limited_to_its_database', () => {
    const run = mongosh(asUser('writerA', PASSWORD, 'SCRAM-SHA-1'), {
      insertOwn: "db.getSiblingDB('authA').items.insertOne({ _id: 'writerA' }).acknowledged",
      findOther: "db.getSiblingDB('authB').items.findOne()",
      insertOther: "db.getSiblingDB('authB').items.insertOne({ _id: 'writerA' })",
    });
    expectValue(run, 'insertOwn', true);
    expectError(run, 'findOther', notAuthorized('authB'));
    expectError(run, 'insertOther', notAuthorized('authB'));
  }],
  ['x509_user_created_in_external', () => expectValue(adminRun, 'x509User', 1)],
  ['x509_client_certificate_authenticates', () => {
    const run = mongosh([
      ...TLS, '--tlsCertificateKeyFile', CLIENT_PEM,
      '--authenticationDatabase', '$external', '--authenticationMechanism', 'MONGODB-X509',
    ], {
      users: USERS_JSON("db.adminCommand({ connectionStatus: 1 })"),
      insertOwn: "db.getSiblingDB('authA').items.insertOne({ _id: 'x509' }).acknowledged",
      findOther: "db.getSiblingDB('authB').items.findOne()",
    });
    expectValue(run, 'users', [{ user: CLIENT_SUBJECT, db: '$external' }]);
    expectValue(run, 'insertOwn', true);
    expectError(run, 'findOther', notAuthorized('authB'));
  }],
];

function expectScram(user, mechanism) {
  const run = mongosh(asUser(user, PASSWORD, mechanism), {
    users: USERS_JSON("db.adminCommand({ connectionStatus: 1 })"),
    find: "db.getSiblingDB('authA').items.findOne({ _id: 1 })",
  });
  expectValue(run, 'users', [{ user, db: 'admin' }]);
  expectValue(run, 'find', { _id: 1, db: 'authA' });
}

let failed = 0;
for (const [checkName, check] of CHECKS) {
  const name = `mongosh-auth/${checkName}`;
  try {
    check();
    console.log(`PASS ${name}`);
  } catch (err) {
    failed++;
    console.log(`FAIL ${name}`);
    const text = err instanceof CheckFailure ? err.message : (err?.stack ?? String(err));
    for (const line of text.split('\n')) console.log(`    ${line}`);
  }
}
process.exitCode = failed ? 1 : 0;
