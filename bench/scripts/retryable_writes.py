"""Retryable-write cost of one large write (replica-set mode), with retryable writes on (PyMongo's
default: every command carries lsid + txnNumber, and the server records each statement of the
command under the session) and off (`retryWrites=false`), RUNS runs each, interleaved; prints
each run's seconds and docs/s.

WORKLOAD `insert`: N small documents in one `insert_many` call (one insert command per 100,000
documents, each written as one commit). `update`: N `UpdateOne({_id: i}, {$inc: {n: 1}})` in one
`bulk_write` over N preloaded documents (one update command per 100,000 statements; each
statement commits on its own).

Usage: target/clients/venv/bin/python bench/scripts/retryable_writes.py URI [N] [RUNS] [WORKLOAD]
(start a release server first, e.g. target/release/tideway --port PORT --storage memory
--replSet rs0; N defaults to 100,000, RUNS to 3, WORKLOAD to insert).
"""

import sys
import time

from pymongo import MongoClient, UpdateOne

uri = sys.argv[1] if len(sys.argv) > 1 else "mongodb://127.0.0.1:27017"
n = int(sys.argv[2]) if len(sys.argv) > 2 else 100_000
runs = int(sys.argv[3]) if len(sys.argv) > 3 else 3
workload = sys.argv[4] if len(sys.argv) > 4 else "insert"
assert workload in ("insert", "update"), workload
clients = {
    "retryable": MongoClient(uri, directConnection=True),
    "retryWrites=false": MongoClient(uri, directConnection=True, retryWrites=False),
}
results = {label: [] for label in clients}
for run in range(runs):
    for label, client in clients.items():
        coll = client.retry_bench.docs
        coll.drop()
        documents = [{"_id": i, "n": i, "s": "x" * 16} for i in range(n)]
        if workload == "insert":
            started = time.perf_counter()
            coll.insert_many(documents)
            seconds = time.perf_counter() - started
        else:
            coll.insert_many(documents)
            updates = [UpdateOne({"_id": i}, {"$inc": {"n": 1}}) for i in range(n)]
            started = time.perf_counter()
            result = coll.bulk_write(updates)
            seconds = time.perf_counter() - started
            assert result.modified_count == n, result.bulk_api_result
        assert coll.estimated_document_count() == n
        results[label].append(seconds)
        print(f"run {run + 1} {label}: {seconds:.2f} s ({n / seconds:,.0f} docs/s)", flush=True)
for label, times in results.items():
    median = sorted(times)[len(times) // 2]
    print(f"{workload} {label}: {n} documents, median {median:.2f} s ({n / median:,.0f} docs/s), "
          f"runs {', '.join(f'{t:.2f}' for t in times)} s")
clients["retryable"].drop_database("retry_bench")
