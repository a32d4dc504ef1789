"""What setting and removing a Cosmos default TTL costs on a loaded collection.

Loads N documents `{_id: i, k, s}` (a 40-byte string) into `fill.c` (dropped first) with
unordered `insert_many` batches of 10,000, then times, one after the other:
`createIndex({_ts: 1}, {expireAfterSeconds: 86400})` (fills the last-write expiry order from
the stored documents), `collMod` to -1 (empties it), `collMod` from -1 to 3600 (fills it again)
and `dropIndexes` (empties it). Prints one line with the load time and each DDL's latency.

Usage: python bench/scripts/default_ttl_fill.py URI [N]   (N defaults to 1,000,000)
"""

import sys
import time

from pymongo import MongoClient


def main() -> None:
    uri = sys.argv[1]
    count = int(sys.argv[2]) if len(sys.argv) > 2 else 1_000_000
    client = MongoClient(uri)
    db = client.fill
    db.c.drop()
    batch = 10_000
    started = time.perf_counter()
    for first in range(0, count, batch):
        docs = [{"_id": i, "k": i % 97, "s": "x" * 40} for i in range(first, min(first + batch, count))]
        db.c.insert_many(docs, ordered=False)
    load = time.perf_counter() - started

    def timed_ms(command: dict) -> float:
        start = time.perf_counter()
        db.command(command)
        return (time.perf_counter() - start) * 1000

    ts_index = {"key": {"_ts": 1}, "name": "_ts_1", "expireAfterSeconds": 86400}
    set_default = timed_ms({"createIndexes": "c", "indexes": [ts_index]})
    to_minus_one = timed_ms({"collMod": "c", "index": {"name": "_ts_1", "expireAfterSeconds": -1}})
    from_minus_one = timed_ms({"collMod": "c", "index": {"name": "_ts_1", "expireAfterSeconds": 3600}})
    drop_default = timed_ms({"dropIndexes": "c", "index": "_ts_1"})
    print(
        f"documents={count} load={load:.1f}s set_default={set_default:.0f}ms "
        f"to_minus_one={to_minus_one:.0f}ms minus_one_to_seconds={from_minus_one:.0f}ms "
        f"drop_default={drop_default:.0f}ms"
    )


if __name__ == "__main__":
    main()
