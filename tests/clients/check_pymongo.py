"""Real-client checks with pymongo against a running tideway server.

Usage: python check_pymongo.py PORT

Prints one line per check: `PASS name`, `FAIL name` (followed by indented details) or
`SKIP name: why`, and exits non-zero if any check failed. tests/clients/run.sh counts the lines.

Every scenario is one function taking a `Ctx` and registered with @scenario; each runs once per
client configuration (no compression, then each wire compressor pymongo can use here). To add a
check, write another @scenario function; raise Skip("why") from it if it does not apply.

The time-to-live scenarios (docs/ttl.md) are registered with @ttl_scenario instead and run once,
after all the others, uncompressed; those that move the server's clock (advanceClock) run last of
all (see the comment above TTL_SCENARIOS).
"""

from __future__ import annotations

import datetime
import sys
import time
import traceback
import warnings
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, Iterator

import bson
import bson.int64
from bson import ObjectId
from pymongo import (
    ASCENDING,
    DESCENDING,
    TEXT,
    DeleteMany,
    DeleteOne,
    InsertOne,
    MongoClient,
    ReturnDocument,
    UpdateMany,
    UpdateOne,
    monitoring,
)
from pymongo.collation import Collation
from pymongo.collection import Collection
from pymongo.database import Database
from pymongo.errors import (
    BulkWriteError,
    ClientBulkWriteException,
    CollectionInvalid,
    DuplicateKeyError,
    OperationFailure,
    WriteError,
)

HOST = "127.0.0.1"
SERVER_VERSION = "8.0.0"
SERVER_VERSION_ARRAY = [8, 0, 0, 0]
MAX_WIRE_VERSION = 25  # MongoDB 8.0
MAX_BSON_OBJECT_SIZE = 16 * 1024 * 1024
COMPRESSORS = ("snappy", "zlib", "zstd")


class Skip(Exception):
    """Raised by a scenario that does not apply to this configuration."""


@dataclass
class Ctx:
    port: int
    label: str  # "none" or the compressor name
    compressor: str | None
    client: MongoClient
    observer: MongoClient  # uncompressed client, for serverStatus reads that don't disturb the counters


SCENARIOS: list[Callable[[Ctx], None]] = []


def scenario(fn: Callable[[Ctx], None]) -> Callable[[Ctx], None]:
    SCENARIOS.append(fn)
    return fn


def uri(port: int) -> str:
    return f"mongodb://{HOST}:{port}/?directConnection=true"


def connect(port: int, compressor: str | None = None, **options) -> MongoClient:
    kwargs = {"serverSelectionTimeoutMS": 3000, **options}
    if compressor:
        kwargs["compressors"] = compressor
    with warnings.catch_warnings():
        # pymongo only warns (and then silently sends uncompressed) when a compressor's module is
        # missing; turn that into an error so a misconfigured run cannot pass by accident.
        warnings.filterwarnings("error", message="Wire protocol compression")
        return MongoClient(uri(port), **kwargs)


def expect_equal(what: str, actual, expected) -> None:
    assert actual == expected, f"{what}: server answered {actual!r}, client expected {expected!r}"


@contextmanager
def scratch_db(ctx: Ctx, scenario_name: str) -> Iterator[Database]:
    """A database of this scenario's own, dropped before and after it (so scenarios and client
    configurations never see each other's data)."""
    name = f"clients_py_{ctx.label}_{scenario_name}"
    ctx.client.drop_database(name)
    try:
        yield ctx.client[name]
    finally:
        ctx.client.drop_database(name)


def all_docs(coll: Collection) -> list[dict]:
    """The whole collection, in _id order."""
    return list(coll.find().sort("_id", ASCENDING))


def expect_write(what: str, result, matched: int, modified: int, upserted_id=None) -> None:
    expect_equal(f"{what}: matched_count", result.matched_count, matched)
    expect_equal(f"{what}: modified_count", result.modified_count, modified)
    expect_equal(f"{what}: upserted_id", result.upserted_id, upserted_id)


class CommandRecorder(monitoring.CommandListener):
    """Records the commands a client sends and the server's replies to them."""

    def __init__(self) -> None:
        self.started_events: list[monitoring.CommandStartedEvent] = []
        self.succeeded_events: list[monitoring.CommandSucceededEvent] = []

    def named(self, name: str) -> tuple[list[dict], list[dict]]:
        """(commands, replies) for one command name, in the order they were sent."""
        commands = [e.command for e in self.started_events if e.command_name == name]
        replies = [e.reply for e in self.succeeded_events if e.command_name == name]
        return commands, replies

    def clear(self) -> None:
        self.started_events.clear()
        self.succeeded_events.clear()

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        self.started_events.append(event)

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        self.succeeded_events.append(event)

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass


def compression_counters(observer: MongoClient) -> dict:
    status = observer.admin.command("serverStatus")
    network = status.get("network")
    assert isinstance(network, dict), f"serverStatus has no 'network' document: {sorted(status)}"
    compression = network.get("compression")
    assert isinstance(compression, dict), (
        f"serverStatus.network has no 'compression' document: {network!r}"
    )
    counters = {}
    for name in COMPRESSORS:
        entry = compression.get(name)
        assert isinstance(entry, dict), (
            f"serverStatus.network.compression has no {name!r} entry: {compression!r}"
        )
        for side in ("compressor", "decompressor"):
            for field in ("bytesIn", "bytesOut"):
                value = entry.get(side, {}).get(field)
                assert isinstance(value, int), (
                    f"serverStatus.network.compression.{name}.{side}.{field} is {value!r}, "
                    "expected an integer"
                )
                counters[(name, side, field)] = value
    return counters


# --- scenarios -------------------------------------------------------------------------------


@scenario
def ping(ctx: Ctx) -> None:
    reply = ctx.client.admin.command("ping")
    expect_equal("ping.ok", reply.get("ok"), 1.0)


@scenario
def hello(ctx: Ctx) -> None:
    reply = ctx.client.admin.command("hello")
    expect_equal("hello.ok", reply.get("ok"), 1.0)
    expect_equal("hello.isWritablePrimary", reply.get("isWritablePrimary"), True)
    expect_equal("hello.maxWireVersion", reply.get("maxWireVersion"), MAX_WIRE_VERSION)
    expect_equal("hello.maxBsonObjectSize", reply.get("maxBsonObjectSize"), MAX_BSON_OBJECT_SIZE)


@scenario
def server_info(ctx: Ctx) -> None:
    info = ctx.client.server_info()
    expect_equal("server_info().version", info.get("version"), SERVER_VERSION)
    expect_equal("server_info().versionArray", info.get("versionArray"), SERVER_VERSION_ARRAY)


@scenario
def unknown_command(ctx: Ctx) -> None:
    try:
        reply = ctx.client.admin.command("tidewayNoSuchCommand")
    except OperationFailure as err:
        expect_equal("error code for an unknown command", err.code, 59)
        expect_equal("codeName for an unknown command", (err.details or {}).get("codeName"),
                     "CommandNotFound")
    else:
        raise AssertionError(f"an unknown command succeeded: server answered {reply!r}")


@scenario
def compression(ctx: Ctx) -> None:
    """The wire traffic really is (or, with no compressor, really is not) compressed."""
    before = compression_counters(ctx.observer)
    for _ in range(3):
        ctx.client.admin.command("ping")
    ctx.client.admin.command("buildInfo")
    after = compression_counters(ctx.observer)
    delta = {key: after[key] - before[key] for key in before}
    if ctx.compressor is None:
        grown = {key: d for key, d in delta.items() if d}
        assert not grown, (
            f"an uncompressed client's commands moved the compression counters: {grown}"
        )
        return
    requests_in = delta[(ctx.compressor, "decompressor", "bytesIn")]
    assert requests_in > 0, (
        f"serverStatus.network.compression.{ctx.compressor}.decompressor.bytesIn did not grow "
        f"(before {before[(ctx.compressor, 'decompressor', 'bytesIn')]}, after "
        f"{after[(ctx.compressor, 'decompressor', 'bytesIn')]}) after 4 commands from a client with "
        f"compressors={ctx.compressor!r}: the requests were not sent compressed "
        "(did the server leave it out of hello.compression?)"
    )
    replies_in = delta[(ctx.compressor, "compressor", "bytesIn")]
    assert replies_in > 0, (
        f"serverStatus.network.compression.{ctx.compressor}.compressor.bytesIn did not grow: the "
        "server did not compress its replies to compressed requests"
    )


# --- CRUD scenarios: each works in a database of its own (scratch_db) and checks every answer ----

ITEMS = [{"_id": i, "n": i, "grp": i % 3, "name": f"item{i:02d}"} for i in range(1, 11)]


def ids(docs) -> list:
    return [doc["_id"] for doc in docs]


def expect_error(what: str, err: OperationFailure, code: int) -> None:
    assert err.code == code, (
        f"{what}: server answered code {err.code!r} ({err.details!r}), client expected code {code}"
    )


@scenario
def crud_insert_find(ctx: Ctx) -> None:
    with scratch_db(ctx, "insert_find") as db:
        coll = db.items
        result = coll.insert_one(dict(ITEMS[0]))
        expect_equal("insert_one: acknowledged", result.acknowledged, True)
        expect_equal("insert_one: inserted_id", result.inserted_id, 1)
        result = coll.insert_many([dict(doc) for doc in ITEMS[1:]])
        expect_equal("insert_many: inserted_ids", result.inserted_ids, list(range(2, 11)))
        expect_equal("all documents after the inserts", all_docs(coll), ITEMS)

        # A document without an _id keeps the ObjectId the client generated for it.
        result = db.auto.insert_one({"note": "no _id"})
        generated = result.inserted_id
        assert isinstance(generated, ObjectId), f"insert_one: inserted_id {generated!r} is no ObjectId"
        expect_equal("find_one by the generated _id", db.auto.find_one({"_id": generated}),
                     {"_id": generated, "note": "no _id"})

        expect_equal("find_one({_id: 4})", coll.find_one({"_id": 4}), ITEMS[3])
        expect_equal("find_one({_id: 404})", coll.find_one({"_id": 404}), None)
        expect_equal("find({grp: 1}).sort({n: -1}): _ids",
                     ids(coll.find({"grp": 1}).sort("n", DESCENDING)), [10, 7, 4, 1])
        expect_equal("find({}, {name: 1, _id: 0}).sort({n: -1}).skip(2).limit(3)",
                     list(coll.find({}, {"name": 1, "_id": 0}).sort("n", DESCENDING).skip(2).limit(3)),
                     [{"name": "item08"}, {"name": "item07"}, {"name": "item06"}])
        expect_equal("find({}, {_id: 1}).sort({grp: 1, n: -1})",
                     list(coll.find({}, {"_id": 1}).sort([("grp", ASCENDING), ("n", DESCENDING)])),
                     [{"_id": i} for i in (9, 6, 3, 10, 7, 4, 1, 8, 5, 2)])
        expect_equal("find_one({_id: 2}, {name: 0}) (exclusion projection)",
                     coll.find_one({"_id": 2}, {"name": 0}), {"_id": 2, "n": 2, "grp": 2})
        expect_equal("find({$or: [{n: {$lt: 2}}, {name: {$in: [...]}}]}).sort({_id: 1}): _ids",
                     ids(coll.find({"$or": [{"n": {"$lt": 2}}, {"name": {"$in": ["item10", "none"]}}]})
                         .sort("_id", ASCENDING)),
                     [1, 10])
        expect_equal("find({n: {$gte: 3, $lte: 8}}).sort({n: 1}).limit(2): _ids",
                     ids(coll.find({"n": {"$gte": 3, "$lte": 8}}).sort("n", ASCENDING).limit(2)), [3, 4])
        expect_equal("find().skip(50)", list(coll.find().skip(50)), [])
        expect_equal("find() on a collection that does not exist", list(db.nothing.find()), [])


@scenario
def crud_cursor_paging(ctx: Ctx) -> None:
    """find().batch_size(3) over 20 documents: one find and six getMores, then killCursors."""
    recorder = CommandRecorder()
    client = connect(ctx.port, ctx.compressor, event_listeners=[recorder])
    try:
        with scratch_db(ctx, "paging") as scratch:
            coll = client[scratch.name].pages
            ns = f"{scratch.name}.pages"
            docs = [{"_id": i, "sq": i * i} for i in range(20)]
            coll.insert_many(docs)

            recorder.clear()
            expect_equal("find().sort({_id: 1}).batch_size(3): documents",
                         list(coll.find().sort("_id", ASCENDING).batch_size(3)), docs)
            finds, find_replies = recorder.named("find")
            more, more_replies = recorder.named("getMore")
            expect_equal("find commands sent", len(finds), 1)
            expect_equal("find: batchSize sent", finds[0].get("batchSize"), 3)
            first = find_replies[0]["cursor"]
            expect_equal("find reply: cursor.ns", first.get("ns"), ns)
            expect_equal("find reply: firstBatch", first.get("firstBatch"), docs[:3])
            cursor_id = first.get("id")
            assert cursor_id, f"find reply: cursor id {cursor_id!r} although 17 documents remain"
            expect_equal("getMore replies: nextBatch sizes",
                         [len(r["cursor"]["nextBatch"]) for r in more_replies], [3, 3, 3, 3, 3, 2])
            expect_equal("getMore replies: documents",
                         [d for r in more_replies for d in r["cursor"]["nextBatch"]], docs[3:])
            expect_equal("getMore: cursor ids sent", [c["getMore"] for c in more], [cursor_id] * 6)
            expect_equal("getMore: batchSize sent", [c.get("batchSize") for c in more], [3] * 6)
            expect_equal("getMore replies: cursor.id (0 once exhausted)",
                         [r["cursor"]["id"] for r in more_replies], [cursor_id] * 5 + [0])
            expect_equal("getMore replies: cursor.ns", {r["cursor"]["ns"] for r in more_replies}, {ns})
            expect_equal("killCursors sent for an exhausted cursor", recorder.named("killCursors")[0], [])

            # Closing a cursor half way kills it on the server.
            recorder.clear()
            cursor = coll.find().sort("_id", ASCENDING).batch_size(3)
            expect_equal("first four documents of a batch_size(3) cursor",
                         [next(cursor) for _ in range(4)], docs[:4])
            open_id = cursor.cursor_id
            assert open_id, f"cursor id {open_id!r} after 4 of 20 documents"
            cursor.close()
            kills, kill_replies = recorder.named("killCursors")
            expect_equal("killCursors commands sent by cursor.close()", len(kills), 1)
            expect_equal("killCursors: cursors sent", kills[0].get("cursors"), [open_id])
            expect_equal("killCursors reply: cursorsKilled", kill_replies[0].get("cursorsKilled"), [open_id])
            expect_equal("killCursors reply: cursorsNotFound", kill_replies[0].get("cursorsNotFound"), [])
            expect_equal("killCursors reply: cursorsAlive", kill_replies[0].get("cursorsAlive"), [])
            try:
                reply = client[scratch.name].command("getMore", open_id, collection="pages")
            except OperationFailure as err:
                expect_error("getMore on a killed cursor", err, 43)  # CursorNotFound
            else:
                raise AssertionError(f"getMore on a killed cursor succeeded: server answered {reply!r}")

            # skip + limit across batches.
            expect_equal("find().sort({_id: -1}).skip(5).limit(7).batch_size(3): _ids",
                         ids(coll.find().sort("_id", DESCENDING).skip(5).limit(7).batch_size(3)),
                         list(range(14, 7, -1)))
    finally:
        client.close()


@scenario
def crud_update(ctx: Ctx) -> None:
    with scratch_db(ctx, "update") as db:
        coll = db.stock
        coll.insert_many([{"_id": 1, "a": 1}, {"_id": 2, "a": 2}, {"_id": 3, "a": 3}])
        expect_write("update_one({_id: 1}, {$set: {b: 2}})",
                     coll.update_one({"_id": 1}, {"$set": {"b": 2}}), 1, 1)
        expect_write("update_one setting the value a field already has",
                     coll.update_one({"_id": 1}, {"$set": {"b": 2}}), 1, 0)
        expect_write("update_one matching nothing",
                     coll.update_one({"_id": 404}, {"$set": {"b": 1}}), 0, 0)
        expect_write("update_many({a: {$gte: 2}}, {$inc, $push})",
                     coll.update_many({"a": {"$gte": 2}}, {"$inc": {"a": 10}, "$push": {"log": "inc"}}), 2, 2)
        expect_write("update_many matching nothing",
                     coll.update_many({"a": {"$gt": 100}}, {"$set": {"x": 1}}), 0, 0)
        expect_equal("documents after update_one/update_many", all_docs(coll), [
            {"_id": 1, "a": 1, "b": 2},
            {"_id": 2, "a": 12, "log": ["inc"]},
            {"_id": 3, "a": 13, "log": ["inc"]},
        ])

        expect_write("replace_one({_id: 2}, {z: 1})", coll.replace_one({"_id": 2}, {"z": 1}), 1, 1)
        expect_equal("document after replace_one", coll.find_one({"_id": 2}), {"_id": 2, "z": 1})
        expect_write("replace_one({_id: 7}, {z: 7}, upsert=True) inserting",
                     coll.replace_one({"_id": 7}, {"z": 7}, upsert=True), 0, 0, upserted_id=7)
        expect_write("replace_one({_id: 7}, {z: 8}, upsert=True) replacing",
                     coll.replace_one({"_id": 7}, {"z": 8}, upsert=True), 1, 1)
        expect_equal("document after the replace_one upserts", coll.find_one({"_id": 7}), {"_id": 7, "z": 8})

        result = coll.update_one({"k": "new"}, {"$set": {"v": 1}, "$setOnInsert": {"created": True}},
                                 upsert=True)
        upserted = result.upserted_id
        assert isinstance(upserted, ObjectId), (
            f"update_one upsert: upserted_id {upserted!r}, expected an ObjectId the server generated"
        )
        expect_write("update_one({k: 'new'}, {$set, $setOnInsert}, upsert=True) inserting", result, 0, 0,
                     upserted_id=upserted)
        expect_equal("upserted document", coll.find_one({"_id": upserted}),
                     {"_id": upserted, "k": "new", "v": 1, "created": True})
        expect_write("update_one upsert matching a document ($setOnInsert ignored)",
                     coll.update_one({"k": "new"}, {"$set": {"v": 2}, "$setOnInsert": {"created": False}},
                                     upsert=True), 1, 1)

        expect_write("update_one({_id: 1}, {$unset, $rename, $addToSet $each})",
                     coll.update_one({"_id": 1}, {"$unset": {"b": ""}, "$rename": {"a": "alpha"},
                                                  "$addToSet": {"tags": {"$each": ["x", "y", "x"]}}}), 1, 1)
        expect_equal("all documents after the updates", all_docs(coll), [
            {"_id": 1, "alpha": 1, "tags": ["x", "y"]},
            {"_id": 2, "z": 1},
            {"_id": 3, "a": 13, "log": ["inc"]},
            {"_id": 7, "z": 8},
            {"_id": upserted, "k": "new", "v": 2, "created": True},
        ])

        try:
            coll.update_one({"_id": 1}, {"$frobnicate": {"a": 1}})
        except WriteError as err:
            expect_error("update with an unknown modifier $frobnicate", err, 9)  # FailedToParse
        else:
            raise AssertionError("an update with the unknown modifier $frobnicate succeeded")
        try:
            coll.replace_one({"_id": 3}, {"_id": 4, "z": 0})
        except WriteError as err:
            expect_error("replace_one changing _id", err, 66)  # ImmutableField
        else:
            raise AssertionError("replace_one({_id: 3}, {_id: 4, ...}) changed a document's _id")
        expect_equal("document after the rejected replacement", coll.find_one({"_id": 3}),
                     {"_id": 3, "a": 13, "log": ["inc"]})


@scenario
def crud_find_one_and_modify(ctx: Ctx) -> None:
    with scratch_db(ctx, "find_and_modify") as db:
        coll = db.counters
        coll.insert_many([{"_id": 1, "n": 1, "grp": "x"}, {"_id": 2, "n": 5, "grp": "x"},
                          {"_id": 3, "n": 3, "grp": "y"}])
        expect_equal("find_one_and_update($inc, return_document=AFTER)",
                     coll.find_one_and_update({"_id": 1}, {"$inc": {"n": 1}},
                                              return_document=ReturnDocument.AFTER),
                     {"_id": 1, "n": 2, "grp": "x"})
        expect_equal("find_one_and_update($inc) (return_document=BEFORE, the default)",
                     coll.find_one_and_update({"_id": 1}, {"$inc": {"n": 1}}),
                     {"_id": 1, "n": 2, "grp": "x"})
        expect_equal("document after two $inc", coll.find_one({"_id": 1}), {"_id": 1, "n": 3, "grp": "x"})
        expect_equal("find_one_and_update(sort={n: -1}, projection={picked: 1}, AFTER)",
                     coll.find_one_and_update({"grp": "x"}, {"$set": {"picked": True}},
                                              sort=[("n", DESCENDING)], projection={"picked": 1},
                                              return_document=ReturnDocument.AFTER),
                     {"_id": 2, "picked": True})
        expect_equal("find_one_and_update matching nothing",
                     coll.find_one_and_update({"_id": 404}, {"$set": {"n": 0}}), None)
        expect_equal("find_one_and_update(upsert=True, AFTER) inserting",
                     coll.find_one_and_update({"_id": 50}, {"$set": {"n": 1}}, upsert=True,
                                              return_document=ReturnDocument.AFTER),
                     {"_id": 50, "n": 1})
        expect_equal("find_one_and_update(upsert=True, BEFORE) inserting",
                     coll.find_one_and_update({"_id": 51}, {"$set": {"n": 1}}, upsert=True), None)
        expect_equal("document upserted by find_one_and_update", coll.find_one({"_id": 51}),
                     {"_id": 51, "n": 1})
        expect_equal("find_one_and_replace(AFTER)",
                     coll.find_one_and_replace({"_id": 3}, {"n": 30}, return_document=ReturnDocument.AFTER),
                     {"_id": 3, "n": 30})
        expect_equal("find_one_and_delete(sort={n: 1})",
                     coll.find_one_and_delete({"grp": "x"}, sort=[("n", ASCENDING)]),
                     {"_id": 1, "n": 3, "grp": "x"})

        # The raw command's lastErrorObject, as mongod reports it.
        reply = db.command("findAndModify", "counters", query={"_id": 60}, update={"$set": {"n": 6}},
                           upsert=True, new=True)
        expect_equal("findAndModify upsert: value", reply.get("value"), {"_id": 60, "n": 6})
        expect_equal("findAndModify upsert: lastErrorObject", reply.get("lastErrorObject"),
                     {"n": 1, "updatedExisting": False, "upserted": 60})
        reply = db.command("findAndModify", "counters", query={"_id": 60}, update={"$inc": {"n": 1}})
        expect_equal("findAndModify update: value (before)", reply.get("value"), {"_id": 60, "n": 6})
        expect_equal("findAndModify update: lastErrorObject", reply.get("lastErrorObject"),
                     {"n": 1, "updatedExisting": True})
        reply = db.command("findAndModify", "counters", query={"_id": 404}, remove=True)
        expect_equal("findAndModify remove of nothing: value", reply.get("value"), None)
        expect_equal("findAndModify remove of nothing: lastErrorObject", reply.get("lastErrorObject"), {"n": 0})

        expect_equal("all documents after the findAndModify calls", all_docs(coll), [
            {"_id": 2, "n": 5, "grp": "x", "picked": True},
            {"_id": 3, "n": 30},
            {"_id": 50, "n": 1},
            {"_id": 51, "n": 1},
            {"_id": 60, "n": 7},
        ])


@scenario
def crud_delete(ctx: Ctx) -> None:
    with scratch_db(ctx, "delete") as db:
        coll = db.trash
        coll.insert_many([{"_id": i, "grp": i % 2} for i in range(1, 11)])
        expect_equal("delete_one({grp: 0}): deleted_count", coll.delete_one({"grp": 0}).deleted_count, 1)
        expect_equal("_ids after delete_one (the first match in natural order goes)",
                     ids(all_docs(coll)), [1, 3, 4, 5, 6, 7, 8, 9, 10])
        expect_equal("delete_one matching nothing: deleted_count",
                     coll.delete_one({"_id": 404}).deleted_count, 0)
        expect_equal("delete_many({grp: 1}): deleted_count", coll.delete_many({"grp": 1}).deleted_count, 5)
        expect_equal("_ids after delete_many", ids(all_docs(coll)), [4, 6, 8, 10])
        expect_equal("delete_many matching nothing: deleted_count",
                     coll.delete_many({"grp": 7}).deleted_count, 0)
        expect_equal("delete_many({_id: {$in: [4, 10, 11]}}): deleted_count",
                     coll.delete_many({"_id": {"$in": [4, 10, 11]}}).deleted_count, 2)
        expect_equal("_ids after delete_many $in", ids(all_docs(coll)), [6, 8])
        expect_equal("delete_many({}): deleted_count", coll.delete_many({}).deleted_count, 2)
        expect_equal("estimated_document_count after deleting everything", coll.estimated_document_count(), 0)
        expect_equal("collections after deleting every document (the collection stays)",
                     db.list_collection_names(), ["trash"])


@scenario
def client_bulk_write(ctx: Ctx) -> None:
    """MongoClient.bulk_write (the 8.0 bulkWrite command, PyMongo >= 4.9): the bulkWrite reference
    page's two-namespace pizzas example, verbose results, and an ordered batch stopped by a
    duplicate key; then update_one's 8.0 `sort`."""
    with scratch_db(ctx, "client_bulk_write") as db:
        db.pizzas.insert_many([
            {"_id": 0, "type": "pepperoni", "size": "small", "price": 4},
            {"_id": 1, "type": "cheese", "size": "medium", "price": 7},
            {"_id": 2, "type": "vegan", "size": "large", "price": 8},
        ])
        db.pizzaOrders.insert_many([
            {"_id": 0, "type": "pepperoni", "number": 5, "orderDate": datetime.datetime(2023, 1, 15, 12, 0, 0)},
            {"_id": 1, "type": "cheese", "number": 15, "orderDate": datetime.datetime(2023, 1, 23, 11, 12, 32)},
            {"_id": 2, "type": "vegan", "number": 20, "orderDate": datetime.datetime(2023, 3, 20, 10, 1, 12)},
        ])
        pizzas, orders = f"{db.name}.pizzas", f"{db.name}.pizzaOrders"
        result = ctx.client.bulk_write([
            InsertOne({"_id": 5, "type": "sausage", "size": "small", "price": 12}, namespace=pizzas),
            InsertOne({"_id": 6, "type": "vegan cheese", "size": "large", "price": 25}, namespace=pizzas),
            UpdateOne({"type": "cheese"}, {"$set": {"price": 15}}, namespace=pizzas),
            DeleteOne({"price": {"$lt": 7}}, namespace=pizzas),
            InsertOne({"_id": 3, "type": "sausage", "number": 7,
                       "orderDate": datetime.datetime(2023, 4, 15, 12, 2, 15)}, namespace=orders),
            InsertOne({"_id": 4, "type": "vegan", "number": 16,
                       "orderDate": datetime.datetime(2023, 5, 12, 11, 3, 11)}, namespace=orders),
            UpdateOne({"type": "cheese"}, {"$set": {"number": 50}}, namespace=orders),
            DeleteOne({"_id": 2}, namespace=orders),
            DeleteOne({"orderDate": {"$lte": datetime.datetime(2023, 3, 15)}}, namespace=orders),
        ], verbose_results=True)
        expect_equal("bulk_write counts (inserted, matched, modified, upserted, deleted)",
                     (result.inserted_count, result.matched_count, result.modified_count,
                      result.upserted_count, result.deleted_count), (4, 2, 2, 0, 3))
        expect_equal("bulk_write insert_results",
                     {idx: r.inserted_id for idx, r in result.insert_results.items()},
                     {0: 5, 1: 6, 4: 3, 5: 4})
        expect_equal("bulk_write update_results",
                     {idx: (r.matched_count, r.modified_count) for idx, r in result.update_results.items()},
                     {2: (1, 1), 6: (1, 1)})
        expect_equal("bulk_write delete_results",
                     {idx: r.deleted_count for idx, r in result.delete_results.items()},
                     {3: 1, 7: 1, 8: 1})
        expect_equal("pizzas after bulk_write", ids(all_docs(db.pizzas)), [1, 2, 5, 6])
        expect_equal("pizzaOrders after bulk_write", ids(all_docs(db.pizzaOrders)), [1, 3, 4])

        result = ctx.client.bulk_write([
            UpdateMany({"size": "large"}, {"$inc": {"price": 1}}, namespace=pizzas),
            UpdateOne({"_id": "new"}, {"$set": {"type": "margherita"}}, upsert=True, namespace=pizzas),
        ], verbose_results=True)
        expect_equal("bulk_write update_many + upsert counts",
                     (result.matched_count, result.modified_count, result.upserted_count), (2, 2, 1))
        expect_equal("bulk_write upserted_id", result.update_results[1].upserted_id, "new")

        try:
            ctx.client.bulk_write([
                InsertOne({"_id": 7, "type": "tomato"}, namespace=pizzas),
                InsertOne({"_id": 1, "type": "duplicate"}, namespace=pizzas),
                InsertOne({"_id": 8, "type": "never written"}, namespace=pizzas),
            ])
        except ClientBulkWriteException as err:
            errors = err.write_errors or []
            expect_equal("bulk_write duplicate: write error codes and indexes",
                         [(e.get("idx"), e.get("code")) for e in errors], [(1, 11000)])
            expect_equal("bulk_write duplicate: keyValue", errors[0].get("keyValue"), {"_id": 1})
            partial = err.partial_result
            expect_equal("bulk_write duplicate: partial inserted_count",
                         partial.inserted_count if partial else None, 1)
        else:
            raise AssertionError("an ordered bulk_write with a duplicate _id succeeded")
        expect_equal("pizzas after the failed bulk_write", ids(all_docs(db.pizzas)), [1, 2, 5, 6, 7, "new"])

        db.sorted.insert_many([{"_id": 1, "v": 3}, {"_id": 2, "v": 1}, {"_id": 3, "v": 2}])
        expect_write("update_one({}, ..., sort={v: 1})",
                     db.sorted.update_one({}, {"$set": {"low": True}}, sort={"v": 1}), 1, 1)
        expect_equal("the document update_one's sort chose", db.sorted.find_one({"low": True})["_id"], 2)


@scenario
def crud_distinct_count(ctx: Ctx) -> None:
    with scratch_db(ctx, "distinct_count") as db:
        coll = db.paint
        coll.insert_many([
            {"_id": 1, "color": "red", "sizes": [1, 2]},
            {"_id": 2, "color": "blue", "sizes": [2, 3]},
            {"_id": 3, "color": "red", "sizes": 3},
            {"_id": 4, "sizes": []},
            {"_id": 5, "color": "green"},
        ])
        # The order of distinct's values is not specified: compare them sorted (duplicates still show).
        expect_equal("distinct('color') (sorted)", sorted(coll.distinct("color")), ["blue", "green", "red"])
        expect_equal("distinct('sizes') (arrays unwound, sorted)", sorted(coll.distinct("sizes")), [1, 2, 3])
        expect_equal("distinct('color', {sizes: 2}) (sorted)",
                     sorted(coll.distinct("color", {"sizes": 2})), ["blue", "red"])
        expect_equal("distinct of a field no document has", coll.distinct("nothing"), [])
        expect_equal("distinct on a collection that does not exist", db.nothing.distinct("color"), [])
        expect_equal("estimated_document_count()", coll.estimated_document_count(), 5)
        expect_equal("estimated_document_count() of a collection that does not exist",
                     db.nothing.estimated_document_count(), 0)
        expect_equal("count command", db.command("count", "paint").get("n"), 5)
        expect_equal("count command with query {color: 'red'}",
                     db.command("count", "paint", query={"color": "red"}).get("n"), 2)
        expect_equal("count command with skip 1, limit 3",
                     db.command("count", "paint", skip=1, limit=3).get("n"), 3)
        expect_equal("count command with skip 4", db.command("count", "paint", skip=4).get("n"), 1)
        expect_equal("count command on a collection that does not exist",
                     db.command("count", "nothing").get("n"), 0)


@scenario
def planner_explain_and_text(ctx: Ctx) -> None:
    with scratch_db(ctx, "planner") as db:
        coll = db.events
        coll.insert_many([{"_id": i, "at": i * 10, "user": i % 20} for i in range(1000)])
        coll.create_index([("at", ASCENDING)])
        coll.create_index([("user", ASCENDING), ("at", ASCENDING)])
        plan = coll.find({"at": {"$gte": 1000, "$lt": 1100}}).explain()
        scan = plan["queryPlanner"]["winningPlan"]["inputStage"]
        expect_equal("explain(): IXSCAN at_1 over [1000, 1100)",
                     (scan["stage"], scan["indexName"], scan["indexBounds"]),
                     ("IXSCAN", "at_1", {"at": ["[1000, 1100)"]}))
        stats = plan["executionStats"]
        expect_equal("explain(): nReturned, totalKeysExamined, totalDocsExamined",
                     (stats["nReturned"], stats["totalKeysExamined"], stats["totalDocsExamined"]),
                     (10, 10, 10))
        newest = list(coll.find({"user": 3}, {"_id": 1}).sort("at", -1).limit(2))
        expect_equal("find({user: 3}).sort(at, -1).limit(2)", newest, [{"_id": 983}, {"_id": 963}])
        covered = coll.find({"at": {"$gte": 1000, "$lt": 1030}}, {"at": 1, "_id": 0}).explain()
        expect_equal("covered find(): PROJECTION_COVERED over IXSCAN, no document read",
                     (covered["queryPlanner"]["winningPlan"]["stage"],
                      covered["queryPlanner"]["winningPlan"]["inputStage"]["stage"],
                      covered["executionStats"]["totalDocsExamined"]),
                     ("PROJECTION_COVERED", "IXSCAN", 0))
        expect_equal("covered find(): values from the index keys",
                     list(coll.find({"at": {"$gte": 1000, "$lt": 1030}}, {"at": 1, "_id": 0})),
                     [{"at": 1000}, {"at": 1010}, {"at": 1020}])
        hinted = coll.find({"at": {"$lt": 50}}).hint([("user", ASCENDING), ("at", ASCENDING)]).explain()
        expect_equal("hint(user_1_at_1)",
                     hinted["queryPlanner"]["winningPlan"]["inputStage"]["indexName"], "user_1_at_1")
        articles = db.articles
        articles.insert_many([{"_id": 1, "subject": "coffee"}, {"_id": 2, "subject": "Coffee Shopping"},
                              {"_id": 3, "subject": "Baking a cake"}])
        articles.create_index([("subject", TEXT)])
        found = list(articles.find({"$text": {"$search": "cake"}}, {"score": {"$meta": "textScore"}}))
        expect_equal("$text cake with textScore", found, [{"_id": 3, "subject": "Baking a cake", "score": 0.75}])


@scenario
def query_language(ctx: Ctx) -> None:
    with scratch_db(ctx, "language") as db:
        coll = db.survey
        coll.insert_many([
            {"_id": 1, "results": [{"item": "A", "score": 5}, {"item": "B", "score": 8}]},
            {"_id": 2, "results": [{"item": "C", "score": 8}, {"item": "B", "score": 4}]},
        ])
        coll.update_many({}, {"$pull": {"results": {"$or": [{"item": "A"}, {"score": {"$lt": 5}}]}}})
        expect_equal("$pull with $or", list(coll.find()), [
            {"_id": 1, "results": [{"item": "B", "score": 8}]},
            {"_id": 2, "results": [{"item": "C", "score": 8}]},
        ])
        coll.update_many({}, {"$set": {"results.$[r].score": 0}}, array_filters=[{"r.item": "B"}])
        expect_equal("array_filters", [d["results"][0]["score"] for d in coll.find()], [0, 8])
        coll.update_one({"_id": 2}, [{"$set": {"total": {"$sum": "$results.score"}}}])
        expect_equal("pipeline update", coll.find_one({"_id": 2}, {"total": 1}), {"_id": 2, "total": 8})
        expect_equal("$expr", [d["_id"] for d in coll.find({"$expr": {"$eq": ["$total", 8]}})], [2])
        expect_equal("aggregation expression in a find projection",
                     coll.find_one({"_id": 2}, {"_id": 0, "n": {"$size": "$results"}}), {"n": 1})
        expect_equal("find with let", [d["_id"] for d in coll.find({"$expr": {"$eq": ["$total", "$$t"]}}, let={"t": 8})],
                     [2])
        found = coll.find_one_and_update({"results.item": "C"}, {"$set": {"seen": True}},
                                         projection={"results.$": 1}, return_document=ReturnDocument.AFTER)
        expect_equal("find_one_and_update with positional projection", found,
                     {"_id": 2, "results": [{"item": "C", "score": 8}]})
        # Collation: a case-insensitive collection default, overridden per query.
        ci = db.create_collection("ci", collation=Collation("en", strength=2))
        ci.insert_many([{"_id": 1, "name": "Ann"}, {"_id": 2, "name": "bob"}, {"_id": 3, "name": "ann"}])
        expect_equal("collection default collation",
                     [d["_id"] for d in ci.find({"name": "ANN"}).sort("_id", ASCENDING)], [1, 3])
        expect_equal("count_documents with the simple collation",
                     ci.count_documents({"name": "ANN"}, collation=Collation("simple")), 0)
        expect_equal("sort under collation('en')",
                     [d["_id"] for d in ci.find().sort([("name", ASCENDING), ("_id", ASCENDING)])
                      .collation(Collation("en"))], [3, 1, 2])
        ci.create_index("name")
        expect_equal("index inherits the collection collation",
                     ci.index_information()["name_1"]["collation"]["strength"], 2)


@scenario
def crud_unique_index(ctx: Ctx) -> None:
    with scratch_db(ctx, "unique_index") as db:
        coll = db.users
        expect_equal("create_index([('email', 1)], unique=True)",
                     coll.create_index([("email", ASCENDING)], unique=True), "email_1")
        info = coll.index_information()
        expect_equal("index names", sorted(info), ["_id_", "email_1"])
        expect_equal("email_1: key", info["email_1"].get("key"), [("email", 1)])
        expect_equal("email_1: unique", info["email_1"].get("unique"), True)
        coll.insert_one({"_id": 1, "email": "a@example.com"})

        try:
            coll.insert_one({"_id": 2, "email": "a@example.com"})
        except DuplicateKeyError as err:
            expect_error("duplicate email", err, 11000)
            details = err.details or {}
            expect_equal("duplicate email: keyPattern", details.get("keyPattern"), {"email": 1})
            expect_equal("duplicate email: keyValue", details.get("keyValue"), {"email": "a@example.com"})
            expect_equal("duplicate email: errmsg", details.get("errmsg"),
                         f"E11000 duplicate key error collection: {db.name}.users index: email_1 "
                         'dup key: { email: "a@example.com" }')
        else:
            raise AssertionError("a duplicate key on a unique index was inserted")
        try:
            coll.insert_one({"_id": 1, "email": "other@example.com"})
        except DuplicateKeyError as err:
            expect_error("duplicate _id", err, 11000)
            expect_equal("duplicate _id: keyPattern", (err.details or {}).get("keyPattern"), {"_id": 1})
        else:
            raise AssertionError("a duplicate _id was inserted")

        try:
            coll.insert_many([{"_id": 3, "email": "b"}, {"_id": 4, "email": "a@example.com"},
                              {"_id": 5, "email": "c"}])
        except BulkWriteError as err:
            expect_equal("ordered insert_many with a duplicate: nInserted", err.details.get("nInserted"), 1)
            expect_equal("ordered insert_many with a duplicate: writeErrors (index, code)",
                         [(e.get("index"), e.get("code")) for e in err.details.get("writeErrors", [])],
                         [(1, 11000)])
        else:
            raise AssertionError("an ordered insert_many with a duplicate key succeeded")
        try:
            coll.insert_many([{"_id": 6, "email": "d"}, {"_id": 7, "email": "b"}, {"_id": 8, "email": "e"}],
                             ordered=False)
        except BulkWriteError as err:
            expect_equal("unordered insert_many with a duplicate: nInserted", err.details.get("nInserted"), 2)
            expect_equal("unordered insert_many with a duplicate: writeErrors (index, code)",
                         [(e.get("index"), e.get("code")) for e in err.details.get("writeErrors", [])],
                         [(1, 11000)])
        else:
            raise AssertionError("an unordered insert_many with a duplicate key succeeded")
        try:
            coll.update_one({"_id": 3}, {"$set": {"email": "a@example.com"}})
        except DuplicateKeyError as err:
            expect_error("update creating a duplicate", err, 11000)
        else:
            raise AssertionError("an update creating a duplicate key succeeded")
        expect_equal("documents after the rejected writes", all_docs(coll), [
            {"_id": 1, "email": "a@example.com"}, {"_id": 3, "email": "b"},
            {"_id": 6, "email": "d"}, {"_id": 8, "email": "e"},
        ])

        # A unique index cannot be built over existing duplicates.
        db.dups.insert_many([{"_id": 1, "k": 1}, {"_id": 2, "k": 1}])
        try:
            db.dups.create_index("k", unique=True)
        except OperationFailure as err:
            expect_error("unique index over duplicate values", err, 11000)
        else:
            raise AssertionError("a unique index was built over duplicate values")
        expect_equal("indexes after the failed build", sorted(db.dups.index_information()), ["_id_"])

        # sparse: documents without the field (1, 3, 6, 8) do not collide.
        expect_equal("create_index('nick', unique=True, sparse=True)",
                     coll.create_index("nick", unique=True, sparse=True), "nick_1")
        expect_equal("nick_1: sparse", coll.index_information()["nick_1"].get("sparse"), True)
        coll.insert_one({"_id": 9, "email": "f", "nick": "z"})
        try:
            coll.insert_one({"_id": 10, "email": "g", "nick": "z"})
        except DuplicateKeyError as err:
            expect_error("duplicate on a sparse unique index", err, 11000)
        else:
            raise AssertionError("a duplicate on a sparse unique index was inserted")

        # partial: only documents matching the filter are indexed (so 11, 12 and 13 coexist).
        expect_equal("create_index('code', unique=True, partialFilterExpression={active: true})",
                     coll.create_index("code", unique=True, partialFilterExpression={"active": True}),
                     "code_1")
        expect_equal("code_1: partialFilterExpression",
                     coll.index_information()["code_1"].get("partialFilterExpression"), {"active": True})
        coll.insert_many([{"_id": 11, "email": "h", "code": "q", "active": False},
                          {"_id": 12, "email": "i", "code": "q", "active": False},
                          {"_id": 13, "email": "j", "code": "q", "active": True}])
        try:
            coll.insert_one({"_id": 14, "email": "k", "code": "q", "active": True})
        except DuplicateKeyError as err:
            expect_error("duplicate on a partial unique index", err, 11000)
        else:
            raise AssertionError("a duplicate on a partial unique index was inserted")

        coll.drop_index("email_1")
        expect_equal("indexes after drop_index('email_1')", sorted(coll.index_information()),
                     ["_id_", "code_1", "nick_1"])
        coll.insert_one({"_id": 20, "email": "a@example.com"})
        expect_equal("_ids with the formerly unique email",
                     ids(coll.find({"email": "a@example.com"}).sort("_id", ASCENDING)), [1, 20])


@scenario
def crud_catalog(ctx: Ctx) -> None:
    """create/list/rename/drop collections, listDatabases, dbStats, dropDatabase."""
    with scratch_db(ctx, "catalog") as db:
        db.create_collection("alpha")
        try:
            db.create_collection("alpha")
        except CollectionInvalid:
            pass
        else:
            raise AssertionError("create_collection('alpha') twice did not raise CollectionInvalid")
        db.beta.insert_many([{"_id": 1}, {"_id": 2}])
        db.beta.create_index("x")
        expect_equal("list_collection_names()", sorted(db.list_collection_names()), ["alpha", "beta"])
        expect_equal("list_collection_names(filter={name: 'beta'})",
                     db.list_collection_names(filter={"name": "beta"}), ["beta"])
        assert db.name in ctx.client.list_database_names(), (
            f"list_database_names() = {ctx.client.list_database_names()!r} lacks {db.name!r}"
        )

        db.beta.rename("gamma")
        expect_equal("collections after renaming beta to gamma", sorted(db.list_collection_names()),
                     ["alpha", "gamma"])
        expect_equal("gamma's documents", all_docs(db.gamma), [{"_id": 1}, {"_id": 2}])
        expect_equal("gamma's indexes (kept by the rename)", sorted(db.gamma.index_information()), ["_id_", "x_1"])
        expect_equal("beta after the rename", db.beta.find_one(), None)
        try:
            db.gamma.rename("alpha")
        except OperationFailure as err:
            expect_error("rename onto an existing collection", err, 48)  # NamespaceExists
        else:
            raise AssertionError("rename onto an existing collection succeeded without dropTarget")
        db.gamma.rename("alpha", dropTarget=True)
        expect_equal("collections after the rename with dropTarget", db.list_collection_names(), ["alpha"])
        expect_equal("alpha's documents", all_docs(db.alpha), [{"_id": 1}, {"_id": 2}])

        stats = db.command("dbStats")
        expect_equal("dbStats: collections", stats.get("collections"), 1)
        expect_equal("dbStats: objects", stats.get("objects"), 2)
        expect_equal("dbStats: indexes", stats.get("indexes"), 2)

        reply = db.drop_collection("alpha")
        expect_equal("drop_collection('alpha'): nIndexesWas", reply.get("nIndexesWas"), 2)
        expect_equal("collections after drop_collection", db.list_collection_names(), [])

        db.delta.insert_one({"_id": 1})
        ctx.client.drop_database(db.name)
        names = ctx.client.list_database_names()
        assert db.name not in names, f"list_database_names() = {names!r} still has {db.name!r} after drop_database"
        expect_equal("collections after drop_database", db.list_collection_names(), [])
        expect_equal("documents after drop_database", list(db.delta.find()), [])


# --- time-to-live scenarios (docs/ttl.md), end to end with real time ----------------------------
#
# These run once, not once per compressor (TTL has nothing to do with the wire encoding, and each
# real-time one sleeps for a second or two). They use an uncompressed client and databases named
# clients_py_ttl_<scenario>.
#
# Order matters: `advanceClock` moves the server's clock forward for good (for the rest of the
# run, including the Node.js and mongosh checks). The real-time scenarios compare the server's
# notion of "now" with the client's (a date field set from the client's clock, `$meta:
# "lastModified"` against time.time()), so every scenario registered with moves_clock=True runs
# after all the others, whatever the order of the definitions below.

TTL_SCENARIOS: list[tuple[Callable[[Ctx], None], bool]] = []  # (scenario, moves the server clock)


def ttl_scenario(moves_clock: bool = False) -> Callable[[Callable[[Ctx], None]], Callable[[Ctx], None]]:
    def register(fn: Callable[[Ctx], None]) -> Callable[[Ctx], None]:
        TTL_SCENARIOS.append((fn, moves_clock))
        return fn

    return register


def sleep_until(deadline: float) -> None:
    """Sleeps until time.monotonic() reaches deadline (at once if it already has)."""
    remaining = deadline - time.monotonic()
    if remaining > 0:
        time.sleep(remaining)


def id_key(value):
    return (type(value).__name__, value)


def sorted_ids(values) -> list:
    return sorted(values, key=id_key)


def read_paths(coll: Collection, universe: list, index_field: str | None = None) -> dict:
    """What each read path sees of the collection: the _ids it returns, or the number it counts.
    universe: every _id the scenario wrote (for the _id-index and find_one lookups)."""
    db = coll.database
    seen = {
        "find() (collection scan): _ids": sorted_ids(ids(coll.find())),
        "find({_id: {$in: all}}) (_id index): _ids":
            sorted_ids(ids(coll.find({"_id": {"$in": universe}}))),
        "find_one({_id: x}) for each x: _ids found":
            sorted_ids(x for x in universe if coll.find_one({"_id": x}) is not None),
        "count_documents({})": coll.count_documents({}),
        "count command": db.command("count", coll.name).get("n"),
        "estimated_document_count()": coll.estimated_document_count(),
        "distinct('_id')": sorted_ids(coll.distinct("_id")),
        "aggregate([{$match: {}}]): _ids": sorted_ids(ids(coll.aggregate([{"$match": {}}]))),
        "aggregate([{$count: 'n'}])": [d.get("n") for d in coll.aggregate([{"$count": "n"}])],
        "aggregate([{$collStats: {count: {}}}]): count":
            [d.get("count") for d in coll.aggregate([{"$collStats": {"count": {}}}])],
        "collStats.count": db.command("collStats", coll.name).get("count"),
    }
    if index_field:
        seen[f"find({{{index_field}: {{$gte: ''}}}}) (secondary index): _ids"] = sorted_ids(
            ids(coll.find({index_field: {"$gte": ""}})))
    return seen


def expected_paths(visible: list, index_field: str | None = None) -> dict:
    n = len(visible)
    expected = {
        "find() (collection scan): _ids": sorted_ids(visible),
        "find({_id: {$in: all}}) (_id index): _ids": sorted_ids(visible),
        "find_one({_id: x}) for each x: _ids found": sorted_ids(visible),
        "count_documents({})": n,
        "count command": n,
        "estimated_document_count()": n,
        "distinct('_id')": sorted_ids(visible),
        "aggregate([{$match: {}}]): _ids": sorted_ids(visible),
        "aggregate([{$count: 'n'}])": [n] if n else [],  # $count emits nothing for no input
        "aggregate([{$collStats: {count: {}}}]): count": [n],
        "collStats.count": n,
    }
    if index_field:
        expected[f"find({{{index_field}: {{$gte: ''}}}}) (secondary index): _ids"] = sorted_ids(visible)
    return expected


def expect_visible(what: str, coll: Collection, universe: list, visible: list,
                   index_field: str | None = None, since: float | None = None) -> None:
    """Every read path sees exactly the documents `visible` (by _id); lists every path that does
    not. since: time.monotonic() of the write the expectation is about (reported on failure)."""
    seen = read_paths(coll, universe, index_field)
    expected = expected_paths(visible, index_field)
    wrong = [f"  {path}: server answered {seen[path]!r}, client expected {expected[path]!r}"
             for path in expected if seen[path] != expected[path]]
    if wrong:
        when = f" ({time.monotonic() - since:.3f} s after the write)" if since is not None else ""
        raise AssertionError(f"{what}{when}: " + f"{len(wrong)} read path(s) disagree:\n" + "\n".join(wrong))


def expect_writes_miss(what: str, coll: Collection, _id, whole_collection: bool = True) -> None:
    """No write path matches the (expired) document _id; with whole_collection (when no document
    at all is visible) neither do update_many({}) and delete_many({})."""
    wrong = []

    def check(path: str, actual, expected) -> None:
        if actual != expected:
            wrong.append(f"  {path}: server answered {actual!r}, client expected {expected!r}")

    result = coll.update_one({"_id": _id}, {"$set": {"touched": 1}})
    check(f"update_one({{_id: {_id!r}}}, $set): (matched, modified)",
          (result.matched_count, result.modified_count), (0, 0))
    if whole_collection:
        result = coll.update_many({}, {"$set": {"touched": 1}})
        check("update_many({}, $set): (matched, modified)", (result.matched_count, result.modified_count), (0, 0))
    result = coll.replace_one({"_id": _id}, {"replaced": 1})
    check(f"replace_one({{_id: {_id!r}}}): (matched, modified)",
          (result.matched_count, result.modified_count), (0, 0))
    check(f"find_one_and_update({{_id: {_id!r}}}, $set)",
          coll.find_one_and_update({"_id": _id}, {"$set": {"touched": 1}}), None)
    check(f"find_one_and_replace({{_id: {_id!r}}})", coll.find_one_and_replace({"_id": _id}, {"replaced": 1}), None)
    check(f"find_one_and_delete({{_id: {_id!r}}})", coll.find_one_and_delete({"_id": _id}), None)
    check(f"delete_one({{_id: {_id!r}}}).deleted_count", coll.delete_one({"_id": _id}).deleted_count, 0)
    if whole_collection:
        check("delete_many({}).deleted_count", coll.delete_many({}).deleted_count, 0)
    if wrong:
        raise AssertionError(f"{what}: {len(wrong)} write path(s) matched an expired document:\n"
                             + "\n".join(wrong))


def server_status(ctx: Ctx) -> dict:
    return ctx.observer.admin.command("serverStatus")


def ttl_metric(ctx: Ctx, name: str, status: dict | None = None) -> int:
    status = status or server_status(ctx)
    value = status.get("metrics", {}).get("ttl", {}).get(name)
    assert isinstance(value, int), (
        f"serverStatus().metrics.ttl.{name} is {value!r}, expected an integer "
        f"(metrics.ttl = {status.get('metrics', {}).get('ttl')!r})"
    )
    return value


def ttl_entry(ctx: Ctx, ns: str, status: dict | None = None) -> dict:
    status = status or server_status(ctx)
    section = status.get("ttl")
    assert isinstance(section, dict), f"serverStatus() has no 'ttl' document: {sorted(status)}"
    entry = section.get(ns)
    assert isinstance(entry, dict), f"serverStatus().ttl has no entry for {ns!r}: {section!r}"
    return entry


def bson_size(docs) -> int:
    return sum(len(bson.encode(doc)) for doc in docs)


def utc_seconds(value: datetime.datetime) -> float:
    """A datetime pymongo decoded (naive, in UTC) as Unix seconds."""
    return value.replace(tzinfo=datetime.timezone.utc).timestamp()


@ttl_scenario()
def ttl_default_real_time(ctx: Ctx) -> None:
    """The collection default on _ts, with real time: visible before, absent from every path at
    its expiry, then deleted by the background reaper."""
    with scratch_db(ctx, "default_real_time") as db:
        coll = db.events
        ns = f"{db.name}.events"
        expect_equal("create_index([('_ts', 1)], expireAfterSeconds=2)",
                     coll.create_index([("_ts", ASCENDING)], expireAfterSeconds=2), "_ts_1")
        expect_equal("_ts_1 in index_information()", coll.index_information().get("_ts_1"),
                     {"v": 2, "key": [("_ts", 1)], "expireAfterSeconds": 2})
        deleted_before = ttl_metric(ctx, "deletedDocuments")

        wall_before = time.time()
        coll.insert_one({"_id": 1, "k": "a"})
        written = time.monotonic()
        wall_after = time.time()
        expect_visible("right after the insert", coll, [1], [1], since=written)
        expect_equal("find_one({_id: 1}) right after the insert", coll.find_one({"_id": 1}),
                     {"_id": 1, "k": "a"})
        expect_equal("distinct('k') right after the insert", coll.distinct("k"), ["a"])
        entry = ttl_entry(ctx, ns)
        expect_equal(f"serverStatus().ttl[{ns!r}].expiredPending before the expiry",
                     entry.get("expiredPending"), 0)
        next_at = entry.get("nextExpiryAt")
        assert isinstance(next_at, datetime.datetime) and (
            wall_before + 2 - 0.002 <= utc_seconds(next_at) <= wall_after + 2 + 0.002
        ), (f"serverStatus().ttl[{ns!r}].nextExpiryAt: server answered {next_at!r}, client expected "
            f"the insert time + 2 s, between {wall_before + 2:.3f} and {wall_after + 2:.3f} (Unix s)")

        sleep_until(written + 2.3)
        expect_visible("2.3 s after the insert (default 2 s)", coll, [1], [], since=written)
        expect_equal("distinct('k') after the expiry", coll.distinct("k"), [])
        expect_writes_miss("2.3 s after the insert", coll, 1)

        # The background reaper (every ttlMonitorSleepSecs = 1 s) deletes it physically.
        deadline = time.monotonic() + 3.0
        while True:
            status = server_status(ctx)
            deleted = ttl_metric(ctx, "deletedDocuments", status)
            pending = ttl_entry(ctx, ns, status).get("expiredPending")
            size = db.command("collStats", "events").get("size")
            if (deleted >= deleted_before + 1 and pending == 0 and size == 0) or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert deleted >= deleted_before + 1 and pending == 0 and size == 0, (
            f"{time.monotonic() - written:.1f} s after the insert (the reaper runs every second): "
            f"serverStatus().metrics.ttl.deletedDocuments is {deleted} (was {deleted_before} before the "
            f"insert, client expected at least {deleted_before + 1}); serverStatus().ttl[{ns!r}]"
            f".expiredPending is {pending!r} (expected 0); collStats.size is {size!r} (expected 0: "
            "the expired document's bytes are gone)"
        )


@ttl_scenario()
def ttl_per_document_real_time(ctx: Ctx) -> None:
    """A default of -1 (TTL on, no default) and per-document ttl values, with real time."""
    with scratch_db(ctx, "per_document_real_time") as db:
        reply = db.command("createIndexes", "docs",
                           indexes=[{"key": {"_ts": 1}, "name": "_ts_1", "expireAfterSeconds": -1}])
        expect_equal("createIndexes _ts_1 with expireAfterSeconds -1: createdCollectionAutomatically",
                     reply.get("createdCollectionAutomatically"), True)
        expect_equal("_ts_1: expireAfterSeconds", db.docs.index_information()["_ts_1"].get("expireAfterSeconds"), -1)
        docs = [
            {"_id": "int32 1", "ttl": 1},
            {"_id": "int64 1", "ttl": bson.int64.Int64(1)},
            {"_id": "double 1.0", "ttl": 1.0},
            {"_id": "ttl -1", "ttl": -1},
            {"_id": "ttl 20.5 (ignored)", "ttl": 20.5},
            {"_id": "ttl 0 (ignored)", "ttl": 0},
            {"_id": "ttl '1' (ignored)", "ttl": "1"},
            {"_id": "no ttl"},
        ]
        universe = [d["_id"] for d in docs]
        db.docs.insert_many(docs)
        written = time.monotonic()
        # Without the _ts index, ttl means nothing.
        db.plain.insert_one({"_id": "ttl 1 without a _ts index", "ttl": 1})
        expect_visible("right after the inserts", db.docs, universe, universe, since=written)

        sleep_until(written + 1.3)
        survivors = ["ttl -1", "ttl 20.5 (ignored)", "ttl 0 (ignored)", "ttl '1' (ignored)", "no ttl"]
        expect_visible("1.3 s after the inserts (default -1)", db.docs, universe, survivors, since=written)
        expect_equal("documents 1.3 s after the inserts", list(db.docs.find().sort("_id", ASCENDING)),
                     sorted((d for d in docs if d["_id"] in survivors), key=lambda d: d["_id"]))
        expect_equal("a ttl: 1 document in a collection without a _ts index, 1.3 s later",
                     list(db.plain.find()), [{"_id": "ttl 1 without a _ts index", "ttl": 1}])


@ttl_scenario()
def ttl_date_field_real_time(ctx: Ctx) -> None:
    """A MongoDB TTL index on a date field (expireAfterSeconds 0: the date is the expiry)."""
    with scratch_db(ctx, "date_field_real_time") as db:
        coll = db.sessions
        expect_equal("create_index('at', expireAfterSeconds=0)", coll.create_index("at", expireAfterSeconds=0),
                     "at_1")
        expect_equal("at_1: expireAfterSeconds", coll.index_information()["at_1"].get("expireAfterSeconds"), 0)
        now = datetime.datetime.now(datetime.timezone.utc)
        written = time.monotonic()
        docs = [
            {"_id": "in 1 s", "at": now + datetime.timedelta(seconds=1)},
            {"_id": "in 3600 s", "at": now + datetime.timedelta(seconds=3600)},
            {"_id": "string at", "at": now.isoformat()},
            {"_id": "no at"},
        ]
        universe = [d["_id"] for d in docs]
        coll.insert_many(docs)
        expect_visible("right after the inserts", coll, universe, universe, index_field=None, since=written)

        sleep_until(written + 1.3)
        expect_visible("1.3 s later", coll, universe, ["in 3600 s", "string at", "no at"], since=written)
        expect_writes_miss("1.3 s later", coll, "in 1 s", whole_collection=False)


@ttl_scenario()
def ttl_ts_protection_and_meta(ctx: Ctx) -> None:
    """_ts cannot be written; its value and the expiry are read through $meta."""
    with scratch_db(ctx, "ts_protection_and_meta") as db:
        coll = db.notes
        coll.create_index([("_ts", ASCENDING)], expireAfterSeconds=100)
        rejected = [
            ("insert_one({_id: 1, _ts: 1})", lambda: coll.insert_one({"_id": 1, "_ts": 1})),
        ]
        for what, write in rejected:
            try:
                write()
            except WriteError as err:
                expect_error(what, err, 2)  # BadValue
                assert "_ts is maintained by the server" in str((err.details or {}).get("errmsg")), (
                    f"{what}: errmsg {(err.details or {}).get('errmsg')!r} does not say that _ts is "
                    "maintained by the server"
                )
            else:
                raise AssertionError(f"{what} succeeded: a client set _ts")
        coll.insert_one({"_id": 2, "a": 1})
        coll.insert_one({"_id": 3, "ttl": -1})
        for what, write in [
            ("update_one({_id: 2}, {$set: {_ts: 1}})", lambda: coll.update_one({"_id": 2}, {"$set": {"_ts": 1}})),
            ("replace_one({_id: 2}, {_ts: 1})", lambda: coll.replace_one({"_id": 2}, {"_ts": 1})),
            ("update_one({_id: 2}, {$rename: {a: '_ts'}})",
             lambda: coll.update_one({"_id": 2}, {"$rename": {"a": "_ts"}})),
        ]:
            try:
                write()
            except WriteError as err:
                expect_error(what, err, 2)  # BadValue
            else:
                raise AssertionError(f"{what} succeeded: a client set _ts")
        expect_equal("documents after the rejected writes (no _ts field)", all_docs(coll),
                     [{"_id": 2, "a": 1}, {"_id": 3, "ttl": -1}])

        wall_before = time.time()
        coll.update_one({"_id": 2}, {"$set": {"a": 2}})
        wall_after = time.time()
        projection = {"ts": {"$meta": "lastModified"}, "exp": {"$meta": "expireAt"}}
        got = coll.find_one({"_id": 2}, projection)
        assert isinstance(got, dict), f"find_one({{_id: 2}}, $meta projection): server answered {got!r}"
        ts, exp = got.get("ts"), got.get("exp")
        assert type(ts) is int and int(wall_before) <= ts <= int(wall_after), (
            f"$meta 'lastModified' of a document written between {wall_before:.3f} and {wall_after:.3f} "
            f"(Unix s): server answered {ts!r} ({type(ts).__name__}), client expected an int in "
            f"[{int(wall_before)}, {int(wall_after)}] (whole document: {got!r})"
        )
        assert isinstance(exp, datetime.datetime) and (
            wall_before + 100 - 0.002 <= utc_seconds(exp) <= wall_after + 100 + 0.002
        ), (f"$meta 'expireAt' with a default of 100 s: server answered {exp!r}, client expected the last "
            f"write + 100 s, a Date between {wall_before + 100:.3f} and {wall_after + 100:.3f} (Unix s)")
        expect_equal("$meta 'lastModified' == floor(expireAt - 100 s)", ts, int(utc_seconds(exp)) - 100)
        expect_equal("the document's other fields next to the $meta ones",
                     {k: v for k, v in got.items() if k not in ("ts", "exp")}, {"_id": 2, "a": 2})
        expect_equal("$meta 'expireAt' of a document with ttl -1",
                     coll.find_one({"_id": 3}, {"exp": {"$meta": "expireAt"}}).get("exp", "missing"), None)


@ttl_scenario()
def ttl_collmod_real_time(ctx: Ctx) -> None:
    """collMod of the default takes effect at once, without rewriting the documents."""
    with scratch_db(ctx, "collmod_real_time") as db:
        coll = db.items
        coll.create_index([("_ts", ASCENDING)], expireAfterSeconds=3600)
        coll.insert_many([{"_id": 1}, {"_id": 2, "ttl": 30}])
        written = time.monotonic()
        reply = db.command("collMod", "items", index={"keyPattern": {"_ts": 1}, "expireAfterSeconds": 1})
        expect_equal("collMod _ts 3600 -> 1: expireAfterSeconds_old", reply.get("expireAfterSeconds_old"), 3600)
        expect_equal("collMod _ts 3600 -> 1: expireAfterSeconds_new", reply.get("expireAfterSeconds_new"), 1)
        expect_equal("_ts_1: expireAfterSeconds after collMod",
                     coll.index_information()["_ts_1"].get("expireAfterSeconds"), 1)
        elapsed = time.monotonic() - written
        assert elapsed < 0.9, f"the collMod took until {elapsed:.3f} s after the insert: too late to check"
        expect_visible("right after collMod to 1 s", coll, [1, 2], [1, 2], since=written)

        sleep_until(written + 1.2)
        expect_visible("1.2 s after the insert, with the default now 1 s (document 2 has ttl 30)",
                       coll, [1, 2], [2], since=written)


@ttl_scenario(moves_clock=True)
def ttl_advance_clock(ctx: Ctx) -> None:
    """advanceClock/runTtlPass: one second before and at the expiry, cursors, upsert, unique keys,
    physical deletion. The background reaper is off meanwhile, so the expired documents stay in
    storage until runTtlPass (and its count is exact)."""
    admin = ctx.client.admin
    was = admin.command("setParameter", 1, ttlMonitorEnabled=False).get("was")
    try:
        with scratch_db(ctx, "advance_clock") as db:
            coll = db.accounts
            ns = f"{db.name}.accounts"
            coll.create_index([("_ts", ASCENDING)], expireAfterSeconds=3600)
            expect_equal("create_index('email', unique=True)", coll.create_index("email", unique=True), "email_1")
            docs = [{"_id": i, "email": f"u{i}@example.com", "n": 11 - i} for i in range(1, 11)]
            universe = [d["_id"] for d in docs]
            coll.insert_many(docs)  # one write: all ten share the same last-write time

            reply = admin.command("advanceClock", 3599)
            assert isinstance(reply.get("now"), datetime.datetime), (
                f"advanceClock 3599: server answered {reply!r}, client expected {{now: <Date>}}"
            )
            expect_visible("3599 s after the insert (default 3600 s)", coll, universe, universe,
                           index_field="email")

            # Cursors opened before the expiry: one in natural order, one with an in-memory sort.
            natural = coll.find().batch_size(2)
            expect_equal("the natural-order cursor's first batch: size", len([next(natural), next(natural)]), 2)
            sorted_by_n = coll.find().sort("n", ASCENDING).batch_size(2)
            first_sorted = [next(sorted_by_n), next(sorted_by_n)]
            expect_equal("the sorted cursor's first batch", ids(first_sorted), [10, 9])

            admin.command("advanceClock", 1)
            expect_equal("find().batch_size(2): documents handed out after the expiry (getMore)",
                         ids(natural), [])
            expect_equal("find().sort({n: 1}).batch_size(2): documents handed out after the expiry (getMore)",
                         ids(sorted_by_n), [])
            expect_visible("3600 s after the insert (default 3600 s)", coll, universe, [], index_field="email")
            expect_writes_miss("3600 s after the insert", coll, 1)
            stats = db.command("dbStats")
            expect_equal("dbStats.objects after the expiry", stats.get("objects"), 0)
            entry = ttl_entry(ctx, ns)
            expect_equal(f"serverStatus().ttl[{ns!r}].expiredPending (reaper off)", entry.get("expiredPending"), 10)
            expect_equal(f"serverStatus().ttl[{ns!r}].nextExpiryAt", entry.get("nextExpiryAt"), None)
            age = entry.get("oldestExpiredAgeMillis")
            assert isinstance(age, int) and 0 <= age < 60_000, (
                f"serverStatus().ttl[{ns!r}].oldestExpiredAgeMillis: server answered {age!r}, client "
                "expected a small non-negative integer (they expired moments ago)"
            )
            expect_equal("collStats.size before any physical delete (the bytes of all 10 expired documents)",
                         db.command("collStats", "accounts").get("size"), bson_size(docs))

            # An upsert where an expired document with the same _id still lies creates a fresh one.
            result = coll.update_one({"_id": 1}, {"$set": {"fresh": True}}, upsert=True)
            expect_write("update_one({_id: 1}, {$set: {fresh: true}}, upsert=True) on the expired _id 1",
                         result, 0, 0, upserted_id=1)
            expect_equal("the upserted document (only the new fields)", coll.find_one({"_id": 1}),
                         {"_id": 1, "fresh": True})
            # An expired document's unique key does not block an insert: the new one replaces it.
            coll.insert_one({"_id": 100, "email": "u2@example.com"})
            expect_equal("find({email: 'u2@example.com'}) after reusing the expired document's email",
                         list(coll.find({"email": "u2@example.com"})), [{"_id": 100, "email": "u2@example.com"}])
            # Nor does its _id.
            coll.insert_one({"_id": 3, "email": "new3@example.com"})
            live = [{"_id": 1, "fresh": True}, {"_id": 3, "email": "new3@example.com"},
                    {"_id": 100, "email": "u2@example.com"}]
            expect_visible("after the upsert and the two inserts", coll, universe + [100], [1, 3, 100])
            expect_equal("find({email: {$gte: ''}}) (secondary index) after the upsert and the two inserts",
                         sorted_ids(ids(coll.find({"email": {"$gte": ""}}))), [3, 100])
            expect_equal("documents after the upsert and the two inserts", all_docs(coll), live)
            expect_equal(f"serverStatus().ttl[{ns!r}].expiredPending (expired 4..10 still stored)",
                         ttl_entry(ctx, ns).get("expiredPending"), 7)

            reply = admin.command("runTtlPass")
            expect_equal("runTtlPass: deleted (expired 4..10; the background reaper is off)",
                         reply.get("deleted"), 7)
            expect_equal(f"serverStatus().ttl[{ns!r}].expiredPending after runTtlPass",
                         ttl_entry(ctx, ns).get("expiredPending"), 0)
            stats = db.command("collStats", "accounts")
            expect_equal("collStats.count after runTtlPass", stats.get("count"), 3)
            expect_equal("collStats.size after runTtlPass (only the live documents' bytes)",
                         stats.get("size"), bson_size(live))
            expect_equal("runTtlPass again: deleted", admin.command("runTtlPass").get("deleted"), 0)
            expect_equal("documents after runTtlPass", all_docs(coll), live)
    finally:
        admin.command("setParameter", 1, ttlMonitorEnabled=True if was is None else was)


# --- runner ----------------------------------------------------------------------------------


def available_compressors() -> tuple[list[str], list[tuple[str, str]]]:
    """Compressors pymongo can use here, and (name, why) for those it cannot."""
    usable, missing = ["zlib"], []
    try:
        import snappy  # noqa: F401  (python-snappy)

        usable.insert(0, "snappy")
    except ImportError as err:
        missing.append(("snappy", f"python-snappy is not importable ({err})"))
    try:
        try:
            from compression import zstd  # noqa: F401  (Python 3.14+)
        except ImportError:
            from backports import zstd  # noqa: F401
        usable.append("zstd")
    except ImportError as err:
        missing.append(("zstd", f"neither compression.zstd nor backports.zstd is importable ({err})"))
    return usable, missing


def report_failure(name: str, err: BaseException) -> None:
    print(f"FAIL {name}")
    if isinstance(err, AssertionError):
        lines = (str(err) or "assertion failed").splitlines()
    else:
        lines = traceback.format_exception(type(err), err, err.__traceback__)
        lines = "".join(lines).rstrip().splitlines()
    for line in lines:
        print(f"    {line}")


def run_scenario(name: str, fn: Callable[[Ctx], None], ctx: Ctx) -> bool:
    """Runs one scenario and prints its PASS/FAIL/SKIP line; False if it failed."""
    ok = True
    started = time.monotonic()
    try:
        fn(ctx)
    except Skip as why:
        print(f"SKIP {name}: {why}")
    except Exception as err:  # noqa: BLE001
        report_failure(f"{name} (after {time.monotonic() - started:.2f} s)", err)
        ok = False
    else:
        print(f"PASS {name}")
    sys.stdout.flush()
    return ok


def main() -> int:
    if len(sys.argv) != 2:
        print("usage: check_pymongo.py PORT", file=sys.stderr)
        return 2
    port = int(sys.argv[1])
    failed = 0
    usable, missing = available_compressors()
    configs: list[str | None] = [None, *usable]

    observer = connect(port)
    try:
        for compressor in configs:
            label = compressor or "none"
            try:
                client = connect(port, compressor)
            except Exception as err:  # noqa: BLE001
                report_failure(f"pymongo[{label}]/connect", err)
                failed += 1
                continue
            ctx = Ctx(port=port, label=label, compressor=compressor, client=client, observer=observer)
            try:
                for fn in SCENARIOS:
                    failed += not run_scenario(f"pymongo[{label}]/{fn.__name__}", fn, ctx)
            finally:
                client.close()
        for name, why in missing:
            print(f"SKIP pymongo[{name}]/*: {why}")

        # The TTL group, once, uncompressed; the scenarios that move the server clock go last.
        try:
            client = connect(port)
        except Exception as err:  # noqa: BLE001
            report_failure("pymongo/ttl/connect", err)
            failed += 1
        else:
            ctx = Ctx(port=port, label="ttl", compressor=None, client=client, observer=observer)
            try:
                ordered = [fn for fn, moves in TTL_SCENARIOS if not moves]
                ordered += [fn for fn, moves in TTL_SCENARIOS if moves]
                for fn in ordered:
                    failed += not run_scenario(f"pymongo/ttl/{fn.__name__}", fn, ctx)
            finally:
                client.close()
    finally:
        observer.close()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
