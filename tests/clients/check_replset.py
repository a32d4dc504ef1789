"""Replica-set mode checks with pymongo against a tideway started with `--replSet rs0`.

Usage: python check_replset.py PORT

Prints `PASS name` / `FAIL name` lines (tests/clients/run.sh counts them) and exits non-zero if a
check failed. Expected values: mongod's hello (replication_info.cpp), retryable writes
(jstests/replsets/retryable_writes_*.js), the manual's change events, and for transactions the
manual's `with_transaction` example (core/transactions-in-applications) and the convenient
transactions API spec (transactions-convenient-api.md: the callback is retried while its error
carries `TransientTransactionError`; any other error aborts and is re-raised), with mongod's
`WriteConflict` (112) for a write to a document changed since the transaction's snapshot.
"""

from __future__ import annotations

import datetime
import sys
import time
import traceback
import uuid

from bson import Int64
from bson.binary import Binary, UuidRepresentation
from pymongo import MongoClient
from pymongo.errors import OperationFailure

PORT = int(sys.argv[1])
SET_NAME = "rs0"
failures = 0


def check(name, function):
    global failures
    try:
        function()
        print(f"PASS replset/{name}")
    except Exception:  # noqa: BLE001 - every failure is reported
        failures += 1
        print(f"FAIL replset/{name}")
        print("    " + traceback.format_exc().replace("\n", "\n    "))


def connects_with_replica_set():
    client = MongoClient(
        f"mongodb://127.0.0.1:{PORT}/?replicaSet={SET_NAME}", serverSelectionTimeoutMS=5000
    )
    hello = client.admin.command("hello")
    assert hello["setName"] == SET_NAME, hello
    assert hello["isWritablePrimary"] is True, hello
    assert hello["primary"] == f"127.0.0.1:{PORT}", hello
    coll = client.test.replset_driver
    coll.drop()
    # Retryable writes are pymongo's default with a replica set: txnNumber on each of these.
    coll.insert_one({"_id": 1, "a": 1})
    coll.update_one({"_id": 1}, {"$inc": {"a": 1}})
    assert coll.find_one_and_update({"_id": 1}, {"$inc": {"a": 1}})["a"] == 2
    assert coll.count_documents({}) == 1
    client.close()


def status_and_config():
    client = MongoClient(f"mongodb://127.0.0.1:{PORT}/?directConnection=true")
    status = client.admin.command("replSetGetStatus")
    assert status["set"] == SET_NAME and status["myState"] == 1, status
    assert status["members"][0]["stateStr"] == "PRIMARY", status
    config = client.admin.command("replSetGetConfig")["config"]
    assert config["_id"] == SET_NAME, config
    client.close()


def retried_insert_is_not_duplicated():
    client = MongoClient(f"mongodb://127.0.0.1:{PORT}/?directConnection=true")
    db = client.test
    db.replset_retry.drop()
    lsid = {"id": Binary.from_uuid(uuid.uuid4(), UuidRepresentation.STANDARD)}
    command = {
        "insert": "replset_retry",
        "documents": [{"_id": 1}],
        "lsid": lsid,
        "txnNumber": Int64(1),
    }
    first = db.command(dict(command))
    second = db.command(dict(command))
    assert first["n"] == 1 and second["n"] == 1, (first, second)
    assert second.get("retriedStmtIds") == [0], second
    assert "writeErrors" not in second, second
    assert db.replset_retry.count_documents({}) == 1
    client.close()


def watch_receives_changes_and_expiry():
    """`watch()` (the manual's change events) receives insert, update, replace and delete, and a
    TTL expiry as a delete event marked `expired` (tideway's extension, docs/ttl.md)."""
    client = MongoClient(f"mongodb://127.0.0.1:{PORT}/?replicaSet={SET_NAME}")
    coll = client.test.replset_watch
    coll.drop()
    coll.create_index("at", expireAfterSeconds=0)
    with coll.watch(max_await_time_ms=500) as stream:
        coll.insert_one({"_id": 1, "a": 1})
        coll.update_one({"_id": 1}, {"$set": {"a": 2}})
        coll.replace_one({"_id": 1}, {"a": 3})
        coll.delete_one({"_id": 1})
        # Expired at once: the reaper (every second by default) deletes it.
        coll.insert_one({"_id": 2, "at": datetime.datetime(2000, 1, 1)})
        seen = []
        deadline = time.time() + 15
        while len(seen) < 6 and time.time() < deadline:
            change = stream.try_next()
            if change is not None:
                seen.append(change)
    kinds = [change["operationType"] for change in seen]
    assert kinds == ["insert", "update", "replace", "delete", "insert", "delete"], kinds
    assert seen[1]["updateDescription"]["updatedFields"] == {"a": 2}, seen[1]
    assert seen[2]["fullDocument"] == {"_id": 1, "a": 3}, seen[2]
    assert "expired" not in seen[3], seen[3]
    expiry = seen[5]
    assert expiry["documentKey"] == {"_id": 2} and expiry["expired"] is True, expiry
    assert isinstance(expiry["expireAt"], datetime.datetime), expiry
    client.close()


def rs_client():
    return MongoClient(
        f"mongodb://127.0.0.1:{PORT}/?replicaSet={SET_NAME}", serverSelectionTimeoutMS=5000
    )


def fresh_collections(client, *names):
    """Drops and creates `names` in `test` (the manual's example creates its collections before
    the transaction), returning them."""
    colls = []
    for name in names:
        client.test.drop_collection(name)
        colls.append(client.test.create_collection(name))
    return colls


def with_transaction_commits_both_collections_at_once():
    """The manual's `with_transaction` example: two collections written in one callback; neither
    write is visible outside until the commit, both are after it."""
    client = rs_client()
    orders, inventory = fresh_collections(client, "txn_orders", "txn_inventory")
    inventory.insert_one({"_id": "abc", "qty": 100})
    seen_outside = []

    def callback(session):
        orders.insert_one({"_id": 1, "sku": "abc", "qty": 5}, session=session)
        inventory.update_one({"_id": "abc"}, {"$inc": {"qty": -5}}, session=session)
        # The transaction sees its own writes; a read outside it does not.
        assert orders.find_one({"_id": 1}, session=session) is not None
        assert inventory.find_one({"_id": "abc"}, session=session)["qty"] == 95
        seen_outside.append(
            (orders.find_one({"_id": 1}), inventory.find_one({"_id": "abc"})["qty"])
        )
        return "committed"

    with client.start_session() as session:
        result = session.with_transaction(callback)
        assert not session.in_transaction
    assert result == "committed", result
    assert seen_outside == [(None, 100)], seen_outside
    assert orders.find_one({"_id": 1}) == {"_id": 1, "sku": "abc", "qty": 5}
    assert inventory.find_one({"_id": "abc"}) == {"_id": "abc", "qty": 95}
    client.close()


class CallbackFailed(Exception):
    pass


def with_transaction_callback_raising_aborts():
    """A callback that raises an error without `TransientTransactionError`: with_transaction
    aborts and re-raises it; none of the callback's writes is visible, in either collection."""
    client = rs_client()
    orders, inventory = fresh_collections(client, "txn_orders_aborted", "txn_inventory_aborted")
    inventory.insert_one({"_id": "abc", "qty": 100})
    calls = []

    def callback(session):
        calls.append(session)
        orders.insert_one({"_id": 1, "sku": "abc"}, session=session)
        inventory.update_one({"_id": "abc"}, {"$inc": {"qty": -5}}, session=session)
        raise CallbackFailed("out of stock")

    with client.start_session() as session:
        try:
            session.with_transaction(callback)
        except CallbackFailed:
            pass
        else:
            raise AssertionError("with_transaction did not re-raise the callback's error")
        assert not session.in_transaction
    assert len(calls) == 1, "a non-transient error must not be retried"
    assert orders.count_documents({}) == 0
    assert inventory.find_one({"_id": "abc"}) == {"_id": "abc", "qty": 100}
    client.close()


def with_transaction_retries_a_write_conflict():
    """Transaction B reads a document (its snapshot is pinned), transaction A commits a change to
    that document, then B writes it: mongod fails B's write with WriteConflict (112) labelled
    `TransientTransactionError`, and with_transaction runs the callback again, now seeing A's
    commit. The final value reflects both (10 - 1 - 2), not B's stale read (10 - 2)."""
    client = rs_client()
    (stock,) = fresh_collections(client, "txn_stock")
    stock.insert_one({"_id": "widget", "qty": 10})
    conflicts = []
    attempts = []

    def other_transaction(session):
        stock.update_one({"_id": "widget"}, {"$inc": {"qty": -1}}, session=session)

    def callback(session):
        attempts.append(len(attempts) + 1)
        widget = stock.find_one({"_id": "widget"}, session=session)
        if len(attempts) == 1:
            with client.start_session() as other:
                other.with_transaction(other_transaction)
        try:
            stock.update_one(
                {"_id": "widget"}, {"$set": {"qty": widget["qty"] - 2}}, session=session
            )
        except OperationFailure as error:
            conflicts.append((error.code, error.has_error_label("TransientTransactionError")))
            raise

    with client.start_session() as session:
        session.with_transaction(callback)
    assert attempts == [1, 2], attempts
    assert conflicts == [(112, True)], conflicts
    assert stock.find_one({"_id": "widget"}) == {"_id": "widget", "qty": 7}
    client.close()


check("connects_with_replica_set", connects_with_replica_set)
check("status_and_config", status_and_config)
check("retried_insert_is_not_duplicated", retried_insert_is_not_duplicated)
check("watch_receives_changes_and_expiry", watch_receives_changes_and_expiry)
check(
    "with_transaction_commits_both_collections_at_once",
    with_transaction_commits_both_collections_at_once,
)
check("with_transaction_callback_raising_aborts", with_transaction_callback_raising_aborts)
check("with_transaction_retries_a_write_conflict", with_transaction_retries_a_write_conflict)
sys.exit(1 if failures else 0)
