"""Replica-set mode checks with pymongo against a tideway started with `--replSet rs0`.

Usage: python check_replset.py PORT

Prints `PASS name` / `FAIL name` lines (tests/clients/run.sh counts them) and exits non-zero if a
check failed. Expected values: mongod's hello (replication_info.cpp), retryable writes
(jstests/replsets/retryable_writes_*.js) and the manual's change events.
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


check("connects_with_replica_set", connects_with_replica_set)
check("status_and_config", status_and_config)
check("retried_insert_is_not_duplicated", retried_insert_is_not_duplicated)
check("watch_receives_changes_and_expiry", watch_receives_changes_and_expiry)
sys.exit(1 if failures else 0)
