"""Real-client checks with pymongo against a running tideway server.

Usage: python check_pymongo.py PORT

Prints one line per check: `PASS name`, `FAIL name` (followed by indented details) or
`SKIP name: why`, and exits non-zero if any check failed. tests/clients/run.sh counts the lines.

Every scenario is one function taking a `Ctx` and registered with @scenario; each runs once per
client configuration (no compression, then each wire compressor pymongo can use here). To add a
check, write another @scenario function; raise Skip("why") from it if it does not apply.
"""

from __future__ import annotations

import sys
import traceback
import warnings
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, Iterator

from bson import ObjectId
from pymongo import ASCENDING, DESCENDING, MongoClient, ReturnDocument, monitoring
from pymongo.collection import Collection
from pymongo.database import Database
from pymongo.errors import (
    BulkWriteError,
    CollectionInvalid,
    DuplicateKeyError,
    OperationFailure,
    WriteError,
)

HOST = "127.0.0.1"
SERVER_VERSION = "7.0.0"
SERVER_VERSION_ARRAY = [7, 0, 0, 0]
MAX_WIRE_VERSION = 21  # MongoDB 7.0
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
        lines = [str(err) or "assertion failed"]
    else:
        lines = traceback.format_exception(type(err), err, err.__traceback__)
        lines = "".join(lines).rstrip().splitlines()
    for line in lines:
        print(f"    {line}")


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
                    name = f"pymongo[{label}]/{fn.__name__}"
                    try:
                        fn(ctx)
                    except Skip as why:
                        print(f"SKIP {name}: {why}")
                    except Exception as err:  # noqa: BLE001
                        report_failure(name, err)
                        failed += 1
                    else:
                        print(f"PASS {name}")
                    sys.stdout.flush()
            finally:
                client.close()
        for name, why in missing:
            print(f"SKIP pymongo[{name}]/*: {why}")
    finally:
        observer.close()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
