"""$group benchmark (issue 11 target): 1,000,000 documents grouped by a key with 16 values
($sum, $avg, $max per group); prints docs/s for the best and median of 3 runs, and the server's
peak resident memory (VmHWM) before and after the runs.

Usage: target/clients/venv/bin/python bench/scripts/group_1m.py mongodb://127.0.0.1:PORT SERVER_PID [N]
(start a release server first, e.g. target/release/tideway --port PORT --storage memory;
SERVER_PID is its process id, read for /proc/PID/status; N defaults to 1,000,000).
"""

import sys
import time

from pymongo import MongoClient


def peak_rss_mib(pid):
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return float("nan")


uri = sys.argv[1] if len(sys.argv) > 1 else "mongodb://127.0.0.1:27017"
pid = int(sys.argv[2])
n = int(sys.argv[3]) if len(sys.argv) > 3 else 1_000_000
client = MongoClient(uri, directConnection=True)
db = client.group_bench
db.events.drop()
batch = []
for i in range(n):
    batch.append({"_id": i, "kind": f"k{i % 16}", "value": i % 1000, "weight": (i % 7) / 7})
    if len(batch) == 10_000:
        db.events.insert_many(batch, ordered=False)
        batch = []
if batch:
    db.events.insert_many(batch, ordered=False)
print(f"loaded {db.events.estimated_document_count()} documents; "
      f"server peak RSS {peak_rss_mib(pid):.0f} MiB")
times = []
for _ in range(3):
    started = time.time()
    groups = list(db.events.aggregate([
        {"$group": {"_id": "$kind", "total": {"$sum": "$value"}, "mean": {"$avg": "$weight"},
                    "top": {"$max": "$value"}}},
    ]))
    times.append(time.time() - started)
    assert len(groups) == 16, groups
best, median = min(times), sorted(times)[1]
print(f"$group over {n} documents into 16 groups: best {best:.2f} s ({n / best:,.0f} docs/s), "
      f"median {median:.2f} s ({n / median:,.0f} docs/s); "
      f"server peak RSS {peak_rss_mib(pid):.0f} MiB")
client.drop_database("group_bench")
