"""Streaming aggregation benchmark (issue 11): over 1,000,000 documents, the time to the first batch
of a pipeline with no blocking stage (`$match` + `$project`, read batch by batch as the cursor
asks), the time to drain it, a `$limit` before a `$group` (the read stops at the limit), and the
server's peak resident memory (VmHWM) before and after.

Usage: target/clients/venv/bin/python bench/scripts/stream_1m.py mongodb://127.0.0.1:PORT SERVER_PID [N]
(start a release server first, e.g. target/release/tideway --port PORT --storage memory;
SERVER_PID is its process id, read for /proc/PID/status; N defaults to 1,000,000).
"""

import statistics
import sys
import time

from pymongo import MongoClient


def peak_rss_mib(pid):
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def timed(runs, action):
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        action()
        times.append(time.perf_counter() - started)
    return min(times), statistics.median(times)


uri = sys.argv[1] if len(sys.argv) > 1 else "mongodb://127.0.0.1:27017"
pid = int(sys.argv[2])
n = int(sys.argv[3]) if len(sys.argv) > 3 else 1_000_000
client = MongoClient(uri, directConnection=True)
db = client.stream_bench
db.events.drop()
batch = []
for i in range(n):
    batch.append({"_id": i, "kind": f"k{i % 16}", "value": i % 1000, "payload": "x" * 64})
    if len(batch) == 10_000:
        db.events.insert_many(batch, ordered=False)
        batch = []
if batch:
    db.events.insert_many(batch, ordered=False)
print(f"loaded {db.events.estimated_document_count()} documents; "
      f"server peak RSS {peak_rss_mib(pid):.0f} MiB")

streaming = [{"$match": {"value": {"$gte": 0}}}, {"$project": {"kind": 1, "value": 1}}]


def first_batch():
    reply = db.command("aggregate", "events", pipeline=streaming, cursor={"batchSize": 101})
    assert len(reply["cursor"]["firstBatch"]) == 101
    db.command("killCursors", "events", cursors=[reply["cursor"]["id"]])


def drain():
    count = sum(1 for _ in db.events.aggregate(streaming, batchSize=10_000))
    assert count == n, count


def limit_then_group():
    groups = list(db.events.aggregate([
        {"$match": {"value": {"$gte": 0}}},
        {"$limit": 1000},
        {"$group": {"_id": "$kind", "count": {"$sum": 1}}},
    ]))
    assert sum(group["count"] for group in groups) == 1000, groups


best, median = timed(20, first_batch)
print(f"first batch (101 documents) of $match+$project over {n}: "
      f"best {best * 1000:.2f} ms, median {median * 1000:.2f} ms")
best, median = timed(3, drain)
print(f"drain of the same pipeline ({n} documents, batches of 10,000): best {best:.2f} s "
      f"({n / best:,.0f} docs/s), median {median:.2f} s")
best, median = timed(20, limit_then_group)
print(f"$match, $limit 1000, $group: best {best * 1000:.2f} ms, median {median * 1000:.2f} ms")
print(f"server peak RSS {peak_rss_mib(pid):.0f} MiB")
client.drop_database("stream_bench")
