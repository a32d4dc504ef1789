"""Full collection scans on two servers, interleaved, RUNS runs each; prints medians and minima.

Reads `tideway_bench.preloaded` (100,000 documents `{_id: 0..N, n, payload}` loaded by
tideway-bench in `_id` order, so insertion order and `_id` order agree) and `shuffled` (the same
number of documents with the same payload, inserted in a random `_id` order, created here on
both servers if missing). Two reads of each: `itcount` (`find({})` read to the end by the
client, batches of 10,000) and `server-only` (an aggregation whose `$match` on a missing field
visits every document and returns none: the server's scan without the reply).

Usage: python bench/scripts/natural_scan.py URI_BASE URI_NEW [RUNS]
(run tideway-bench once against both first, so `preloaded` exists; RUNS defaults to 11).
"""

import random
import statistics
import sys
import time

from pymongo import MongoClient

uris = {"base": sys.argv[1], "new": sys.argv[2]}
runs = int(sys.argv[3]) if len(sys.argv) > 3 else 11
N = 100_000
clients = {name: MongoClient(uri, directConnection=True) for name, uri in uris.items()}
payload = clients["base"].tideway_bench.preloaded.find_one({"_id": 0})["payload"]

if any(c.tideway_bench.shuffled.estimated_document_count() != N for c in clients.values()):
    ids = list(range(N))
    random.Random(7).shuffle(ids)
    for client in clients.values():
        client.tideway_bench.shuffled.drop()
        for start in range(0, N, 1000):
            batch = [{"_id": i, "n": 0, "payload": payload} for i in ids[start : start + 1000]]
            client.tideway_bench.shuffled.insert_many(batch, ordered=False)


def itcount(coll):
    assert sum(1 for _ in coll.find({}, batch_size=10_000)) == N


def server_only(coll):
    assert list(coll.aggregate([{"$match": {"nothere": 1}}])) == []


for name in ["preloaded", "shuffled"]:
    for label, read in [("itcount", itcount), ("server-only", server_only)]:
        times = {server: [] for server in clients}
        for _ in range(runs):
            for server, client in clients.items():
                started = time.perf_counter()
                read(client.tideway_bench[name])
                times[server].append((time.perf_counter() - started) * 1000)
        median = {server: statistics.median(ms) for server, ms in times.items()}
        print(
            f"{name:9} {label:11} "
            + "  ".join(
                f"{server} median {median[server]:.0f} ms (min {min(times[server]):.0f})"
                for server in clients
            )
            + f"  new/base {median['new'] / median['base']:.2f}"
        )
