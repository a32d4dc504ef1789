#!/usr/bin/env bash
# Real-client checks: pymongo, the Node.js `mongodb` driver, Mongoose and mongosh against a tideway
# server.
#
#   bash tests/clients/run.sh
#
# Installs the clients itself, idempotently, into target/clients/ (a Python venv and an npm
# folder, at the versions pinned in tests/clients/requirements*.txt, package.json and
# package-lock.json), starts `tideway --storage memory` on a free 127.0.0.1 port, runs each
# check file (the run_check lines near the end; add new ones there) against it, stops it by its
# PID, then does the same with a --replSet server and, for the authentication/TLS checks, with one
# fresh --auth --tlsMode requireTLS server per client (certificates made by make_certs.py), and
# ends with the line
# `clients: N passed, M failed` (read by CI). Exits non-zero if any check failed.
#
# Environment:
#   TIDEWAY_BIN   server binary to test; if unset, `cargo build --release` runs first and
#                 target/release/tideway is used.
#   PYTHON        interpreter for the venv (default python3).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
if [[ -n "${TIDEWAY_BIN:-}" && "$TIDEWAY_BIN" != /* ]]; then
  TIDEWAY_BIN="$PWD/$TIDEWAY_BIN" # relative to where run.sh was started
fi
cd "$ROOT"

CLIENTS_DIR="$ROOT/target/clients"
VENV="$CLIENTS_DIR/venv"
NODE_DIR="$CLIENTS_DIR/node"
PYTHON="${PYTHON:-python3}"
CHECK_TIMEOUT=180 # seconds, per check file
START_TIMEOUT=30  # seconds for the server to accept connections

note() { echo "clients: $*"; }
die() { echo "clients: error: $*" >&2; exit 1; }

fingerprint() { cat "$@" | sha256sum | cut -d' ' -f1; }

# --- install the clients -----------------------------------------------------------------------

install_python() {
  local stamp="$VENV/.tideway-installed"
  local want
  want="$(fingerprint "$HERE"/requirements*.txt; "$PYTHON" --version)"
  if [[ -x "$VENV/bin/python" && -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
    return 0
  fi
  note "installing Python clients into ${VENV#"$ROOT"/}"
  if [[ ! -x "$VENV/bin/python" ]]; then
    "$PYTHON" -m venv "$VENV" || die "could not create the venv with $PYTHON"
  fi
  local pip=("$VENV/bin/python" -m pip install --disable-pip-version-check --no-input -q --only-binary=:all:)
  "${pip[@]}" -r "$HERE/requirements.txt" || die "pip could not install $HERE/requirements.txt"
  # The compressor packages are optional: without one, check_pymongo.py skips that compressor.
  local complete=1 extra log
  for extra in snappy zstd; do
    log="$CLIENTS_DIR/pip-$extra.log"
    if "${pip[@]}" -r "$HERE/requirements-$extra.txt" >"$log" 2>&1; then
      rm -f "$log"
    else
      complete=0
      note "could not install the $extra compressor's package (pymongo's $extra checks will be skipped); pip said:"
      sed 's/^/    /' "$log" | tail -n 15
    fi
  done
  # Only a complete install is remembered, so a failed optional package is retried next run.
  if ((complete)); then echo "$want" >"$stamp"; else rm -f "$stamp"; fi
}

install_node() {
  command -v node >/dev/null || die "node is not installed"
  command -v npm >/dev/null || die "npm is not installed"
  local stamp="$NODE_DIR/.tideway-installed"
  local want
  want="$(fingerprint "$HERE/package.json" "$HERE/package-lock.json"; node --version)"
  if [[ -x "$NODE_DIR/node_modules/.bin/mongosh" && -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
    return 0
  fi
  note "installing Node.js clients into ${NODE_DIR#"$ROOT"/}"
  mkdir -p "$NODE_DIR"
  rm -f "$stamp"
  cp "$HERE/package.json" "$HERE/package-lock.json" "$NODE_DIR/"
  # --ignore-scripts: mongosh's native add-ons (machine id, kerberos, ...) are optional and would
  # only be compiled with node-gyp; the shell works without them and the install stays fast.
  (cd "$NODE_DIR" && npm ci --no-audit --no-fund --ignore-scripts --loglevel=error) ||
    die "npm ci failed in $NODE_DIR"
  [[ -x "$NODE_DIR/node_modules/.bin/mongosh" ]] || die "npm ci did not install mongosh"
  echo "$want" >"$stamp"
}

mkdir -p "$CLIENTS_DIR"
install_started=$SECONDS
install_python
install_node
note "clients ready in $((SECONDS - install_started))s: $("$VENV/bin/python" -c 'import pymongo; print("pymongo", pymongo.__version__)'), mongodb $(node -p "require('$NODE_DIR/node_modules/mongodb/package.json').version"), mongoose $(node -p "require('$NODE_DIR/node_modules/mongoose/package.json').version"), mongosh $("$NODE_DIR/node_modules/.bin/mongosh" --version)"

# --- the server --------------------------------------------------------------------------------

if [[ -z "${TIDEWAY_BIN:-}" ]]; then
  note "TIDEWAY_BIN is unset: cargo build --release"
  cargo build --release
  TIDEWAY_BIN="$ROOT/target/release/tideway"
fi
[[ -x "$TIDEWAY_BIN" ]] || die "no server binary at $TIDEWAY_BIN"

RUN_DIR="$(mktemp -d "$CLIENTS_DIR/run.XXXXXX")"
SERVER_LOG="$RUN_DIR/server.log"
SERVER_PID=""
PORT=""
passed=0
failed=0
skipped=0

stop_server() {
  # Stops the server this script started, by its PID; returns its exit status (or 124 if it had
  # to be killed).
  local pid=$SERVER_PID status=0 i
  [[ -n "$pid" ]] || return 0
  SERVER_PID=""
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null || true
    for ((i = 0; i < 100; i++)); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    if kill -0 "$pid" 2>/dev/null; then
      echo "clients: server (pid $pid) still running 10s after SIGTERM: killing it" >&2
      kill -KILL "$pid" 2>/dev/null || true
      wait "$pid" 2>/dev/null || true
      return 124
    fi
  fi
  wait "$pid" 2>/dev/null || status=$?
  return "$status"
}

show_server_log() {
  echo "----- server log ($SERVER_LOG) -----"
  cat "$SERVER_LOG" 2>/dev/null || true
  echo "----- end of server log -----"
}

summary_printed=0

keep_run_dir() {
  [[ -f "$SERVER_LOG" ]] && show_server_log
  echo "clients: this run's files are kept in ${RUN_DIR#"$ROOT"/}"
}

on_exit() {
  local status=$?
  stop_server || true
  if ((summary_printed)); then
    ((failed == 0)) && rm -rf "$RUN_DIR"
  elif ((status != 0)); then
    # Aborted before the summary (setup error, interrupt): show what the server said, and still
    # end with the line CI reads.
    keep_run_dir
    echo "clients: $passed passed, $((failed + 1)) failed"
  else
    rm -rf "$RUN_DIR"
  fi
  exit "$status"
}
trap on_exit EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

free_port() {
  "$PYTHON" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# start_server [EXTRA_ARGS...]: a memory server on a free port (extra arguments: e.g. --replSet).
start_server() {
  local attempt i
  for attempt in 1 2 3; do
    PORT="$(free_port)"
    # NO_COLOR: the pretty log format colours its output even into a file.
    NO_COLOR=1 "$TIDEWAY_BIN" --storage memory --bind_ip 127.0.0.1 --port "$PORT" --enableTestCommands "$@" \
      >>"$SERVER_LOG" 2>&1 &
    SERVER_PID=$!
    for ((i = 0; i < START_TIMEOUT * 10; i++)); do
      if ! kill -0 "$SERVER_PID" 2>/dev/null; then
        break # exited: maybe the port was taken in the meantime; try another one
      fi
      if port_open "$PORT"; then
        note "server $TIDEWAY_BIN (pid $SERVER_PID) is listening on 127.0.0.1:$PORT"
        return 0
      fi
      sleep 0.1
    done
    if kill -0 "$SERVER_PID" 2>/dev/null; then
      echo "clients: the server did not accept connections on port $PORT within ${START_TIMEOUT}s" >&2
      return 1 # on_exit stops it and shows its log
    fi
    local status=0
    wait "$SERVER_PID" || status=$?
    SERVER_PID=""
    echo "clients: the server exited with status $status before listening (attempt $attempt)" >&2
    ((attempt == 3)) || show_server_log >&2 # the last one is shown by on_exit
  done
  return 1
}

# --- the checks --------------------------------------------------------------------------------

# run_check NAME COMMAND...: runs one check file, which prints `PASS x` / `FAIL x` / `SKIP x: why`
# lines; counts them. A check file that fails without printing a FAIL line counts as one failure.
run_check() {
  local name=$1 out="$RUN_DIR/$1.out" status=0 p f s
  shift
  echo "== $name"
  set +e
  timeout --kill-after=10 "$CHECK_TIMEOUT" "$@" 2>&1 | tee "$out"
  status=${PIPESTATUS[0]}
  set -e
  p=$(grep -c '^PASS ' "$out" || true)
  f=$(grep -c '^FAIL ' "$out" || true)
  s=$(grep -c '^SKIP ' "$out" || true)
  if ((status != 0 && f == 0)); then
    if ((status == 124)); then
      echo "FAIL $name (timed out after ${CHECK_TIMEOUT}s)"
    else
      echo "FAIL $name (exited with status $status)"
    fi
    f=1
  elif ((status == 0 && p == 0 && f == 0)); then
    echo "FAIL $name (ran no check)"
    f=1
  fi
  passed=$((passed + p))
  failed=$((failed + f))
  skipped=$((skipped + s))
}

start_server || die "could not start the server"

checks_started=$SECONDS
run_check pymongo "$VENV/bin/python" "$HERE/check_pymongo.py" "$PORT"
TIDEWAY_CLIENTS_NODE_DIR="$NODE_DIR" run_check node node "$HERE/check_node.mjs" "$PORT"
MONGOSH_BIN="$NODE_DIR/node_modules/.bin/mongosh" TIDEWAY_MONGOSH_HOME="$RUN_DIR/mongosh-home" \
  run_check mongosh node "$HERE/check_mongosh.js" "$PORT"

# The server must still be up after all that, and shut down cleanly on SIGTERM.
echo "== server"
if kill -0 "$SERVER_PID" 2>/dev/null; then
  echo "PASS server/alive_after_checks"
  passed=$((passed + 1))
else
  echo "FAIL server/alive_after_checks (the server exited during the checks)"
  failed=$((failed + 1))
fi
shutdown_status=0
stop_server || shutdown_status=$?
if ((shutdown_status == 0)); then
  echo "PASS server/graceful_shutdown"
  passed=$((passed + 1))
else
  echo "FAIL server/graceful_shutdown (exit status $shutdown_status after SIGTERM, expected 0)"
  failed=$((failed + 1))
fi

# Replica-set mode: a second server started with --replSet (docs/architecture.md).
echo "== replset"
start_server --replSet rs0 || die "could not start the --replSet server"
run_check replset "$VENV/bin/python" "$HERE/check_replset.py" "$PORT"
TIDEWAY_CLIENTS_NODE_DIR="$NODE_DIR" run_check node-replset node "$HERE/check_node_replset.mjs" "$PORT"
TIDEWAY_CLIENTS_NODE_DIR="$NODE_DIR" run_check mongoose-txn node "$HERE/check_mongoose_txn.mjs" "$PORT"
MONGOSH_HOME="$RUN_DIR/mongosh-home" HOME="$RUN_DIR/mongosh-home" run_check replset-mongosh \
  "$NODE_DIR/node_modules/.bin/mongosh" "mongodb://127.0.0.1:$PORT/?directConnection=true" \
  --quiet --norc --eval "
    const admin = db.getSiblingDB('admin');
    const status = rs.status();
    print(status.ok === 1 && status.set === 'rs0' && status.members[0].stateStr === 'PRIMARY'
      ? 'PASS replset/mongosh_rs_status' : 'FAIL replset/mongosh_rs_status ' + tojson(status));
    // mongosh throws a command error where the driver answer is ok: 0; either shape counts.
    let initiate;
    try { initiate = admin.runCommand({replSetInitiate: {}}); } catch (error) { initiate = error; }
    print(initiate.code === 23 ? 'PASS replset/mongosh_rs_initiate_already_initialized'
      : 'FAIL replset/mongosh_rs_initiate_already_initialized ' + tojson(initiate));"
replset_status=0
stop_server || replset_status=$?
if ((replset_status == 0)); then
  echo "PASS server/replset_graceful_shutdown"
  passed=$((passed + 1))
else
  echo "FAIL server/replset_graceful_shutdown (exit status $replset_status after SIGTERM)"
  failed=$((failed + 1))
fi

# Authentication, authorization and TLS (docs/compatibility.md): one fresh server per client, as
# the localhost-exception checks need a server without users, each with access control and
# requireTLS (by flags, or for mongosh's by a configuration file) and certificates from a test
# CA made for this run (make_certs.py) that also signs the MONGODB-X509 client certificate.
echo "== auth"
TLS_DIR="$RUN_DIR/tls"
"$VENV/bin/python" "$HERE/make_certs.py" "$TLS_DIR" || die "could not make the test certificates"
AUTH_TLS_ARGS=(--tlsMode requireTLS --tlsCertificateKeyFile "$TLS_DIR/server.pem"
  --tlsCAFile "$TLS_DIR/ca.pem" --tlsAllowConnectionsWithoutCertificates)
if "$TIDEWAY_BIN" --help | grep -qE -- '(^|[[:space:]])--auth([[:space:],]|$)'; then
  AUTH_FLAG_ARGS=(--auth "${AUTH_TLS_ARGS[@]}")
  # The same settings as a configuration file, for one of the servers (mongod's keys).
  cat >"$TLS_DIR/auth.conf" <<EOF
security:
  authorization: enabled
net:
  tls:
    mode: requireTLS
    certificateKeyFile: "$TLS_DIR/server.pem"
    CAFile: "$TLS_DIR/ca.pem"
    allowConnectionsWithoutCertificates: true
EOF
  AUTH_FILE_ARGS=(--config "$TLS_DIR/auth.conf")
  echo "PASS server/accepts_auth_flag"
  passed=$((passed + 1))
else
  # The TLS and SCRAM checks still run; every enforcement check fails, as it should.
  echo "FAIL server/accepts_auth_flag ($TIDEWAY_BIN --help lists no --auth: its servers below run without it)"
  failed=$((failed + 1))
  AUTH_FLAG_ARGS=("${AUTH_TLS_ARGS[@]}")
  AUTH_FILE_ARGS=("${AUTH_TLS_ARGS[@]}")
fi

# run_auth_check SERVER_ARGS NAME COMMAND...: run_check NAME COMMAND... against a fresh server
# started with the arguments in the array named SERVER_ARGS, stopped after it; a @PORT@ argument
# becomes the server's port.
run_auth_check() {
  local -n server_args=$1
  local name=$2 status=0 arg args=()
  shift
  start_server "${server_args[@]}" || die "could not start the server for $name"
  for arg in "$@"; do args+=("${arg//@PORT@/$PORT}"); done
  run_check "${args[@]}"
  stop_server || status=$?
  if ((status != 0)); then
    echo "FAIL server/${name}_graceful_shutdown (exit status $status after SIGTERM)"
    failed=$((failed + 1))
  fi
}
run_auth_check AUTH_FLAG_ARGS pymongo-auth "$VENV/bin/python" "$HERE/check_auth_pymongo.py" @PORT@ "$TLS_DIR"
TIDEWAY_CLIENTS_NODE_DIR="$NODE_DIR" run_auth_check AUTH_FLAG_ARGS node-auth \
  node "$HERE/check_auth_node.mjs" @PORT@ "$TLS_DIR"
MONGOSH_BIN="$NODE_DIR/node_modules/.bin/mongosh" TIDEWAY_MONGOSH_HOME="$RUN_DIR/mongosh-home" \
  run_auth_check AUTH_FILE_ARGS mongosh-auth node "$HERE/check_auth_mongosh.js" @PORT@ "$TLS_DIR"

note "checks took $((SECONDS - checks_started))s"
if ((failed)); then keep_run_dir; fi
if ((skipped)); then note "$skipped skipped (see the SKIP lines above)"; fi
summary_printed=1
echo "clients: $passed passed, $failed failed" # the closing line CI reads: keep it last
((failed == 0))
