'use strict';
// The environment the client checks run mongosh in (check_mongosh.js, check_auth_mongosh.js):
// a scratch HOME, and everything that would reach the network switched off: telemetry is forced
// off and has no endpoint, and the update check has no URL.

const fs = require('node:fs');
const path = require('node:path');

/** The environment for mongosh with `home` as its HOME (created if missing). */
function mongoshEnv(home) {
  fs.mkdirSync(home, { recursive: true });
  // A global config file (EJSON) that switches off everything that would phone home.
  const globalConfig = path.join(home, 'mongosh-global.conf');
  fs.writeFileSync(globalConfig, JSON.stringify({
    forceDisableTelemetry: true,
    telemetryEndpoint: '',
    updateURL: '',
  }));
  return {
    ...process.env,
    HOME: home,
    DO_NOT_TRACK: '1',
    CI: '1', // mongosh skips its update check in CI
    MONGOSH_GLOBAL_CONFIG_FILE_FOR_TESTING: globalConfig,
    MONGOSH_FORCE_DISABLE_TELEMETRY_FOR_TESTING: '1',
    MONGOSH_TELEMETRY_ENDPOINT: '',
    NO_COLOR: '1',
  };
}

module.exports = { mongoshEnv };
