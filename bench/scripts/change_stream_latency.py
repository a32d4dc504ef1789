"""Change-stream latency benchmark (issue 13): a writer inserts documents one at a time, each
carrying the instant it was sent; a watcher on the collection's change stream timestamps each
insert event as it arrives. Reports write -> event latency p50/p99 (and max) over N events.

Usage: target/clients/venv/bin/python bench/scripts/change_stream_latency.py mongodb://127.0.0.1:PORT [N]
(start a release server with an oplog first, e.g.
target/release/tideway --port PORT --storage memory --oplogSize 256; N defaults to 2000).
"""

import statistics
import sys
import threading
import time

from pymongo import MongoClient


def main():
    uri = sys.argv[1]
    count = int(sys.argv[2]) if len(sys.argv) > 2 else 2000
    client = MongoClient(uri)
    coll = client.bench.change_latency
    coll.drop()
    coll.insert_one({"_id": "warm-up"})
    latencies_ms = []
    ready = threading.Event()

    def watch():
        with coll.watch(max_await_time_ms=1000) as stream:
            ready.set()
            for event in stream:
                if event["operationType"] != "insert":
                    continue
                received = time.perf_counter()
                latencies_ms.append((received - event["fullDocument"]["sent"]) * 1000)
                if len(latencies_ms) == count:
                    return

    watcher = threading.Thread(target=watch)
    watcher.start()
    ready.wait()
    # One insert at a time, so each event's latency is its own (not a batch's).
    for number in range(count):
        coll.insert_one({"_id": number, "sent": time.perf_counter()})
        time.sleep(0.001)
    watcher.join(timeout=60)
    latencies_ms.sort()
    p50 = statistics.median(latencies_ms)
    p99 = latencies_ms[min(len(latencies_ms) - 1, int(len(latencies_ms) * 0.99))]
    print(
        f"change stream latency over {len(latencies_ms)} events: "
        f"p50 {p50:.3f} ms, p99 {p99:.3f} ms, max {latencies_ms[-1]:.3f} ms"
    )


if __name__ == "__main__":
    main()
