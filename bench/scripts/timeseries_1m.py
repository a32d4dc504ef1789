"""Time-series benchmark (issue 12 target): inserts 1,000,000 measurements (100 sensors, one
measurement per sensor per second) into a time-series collection, then runs time-range
aggregations over them: a one-minute window (6,000 measurements), a one-hour window (360,000)
and the whole collection grouped by hour. Prints the insert rate, the best and median of 3 runs
of each aggregation, and the server's peak resident memory (VmHWM). For comparison it then loads
the same measurements into an ordinary collection (only the `_id` index) and times its insert and
the one-minute window there (a collection scan).

Usage: target/clients/venv/bin/python bench/scripts/timeseries_1m.py mongodb://127.0.0.1:PORT SERVER_PID [N]
(start a release server first, e.g. target/release/tideway --port PORT --storage memory;
SERVER_PID is its process id, read for /proc/PID/status; N defaults to 1,000,000).
"""

import datetime
import sys
import time

from pymongo import MongoClient

SENSORS = 100


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
db = client.timeseries_bench
db.drop_collection("metrics")
db.create_collection(
    "metrics", timeseries={"timeField": "ts", "metaField": "sensor", "granularity": "seconds"}
)
t0 = datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc)
started = time.time()


def load(collection):
    """Inserts the n measurements in batches of 10,000; returns the seconds it took."""
    begun = time.time()
    batch = []
    for i in range(n):
        second, sensor = divmod(i, SENSORS)
        batch.append({
            "ts": t0 + datetime.timedelta(seconds=second),
            "sensor": {"id": sensor, "site": f"s{sensor % 10}"},
            "temp": 20 + (i % 97) / 10,
            "load": i % 13,
        })
        if len(batch) == 10_000:
            collection.insert_many(batch, ordered=False)
            batch = []
    if batch:
        collection.insert_many(batch, ordered=False)
    took = time.time() - begun
    count = collection.count_documents({})
    assert count == n, count
    return took


insert_s = load(db.metrics)
print(f"inserted {n:,} measurements in {insert_s:.2f} s ({n / insert_s:,.0f} measurements/s); "
      f"server peak RSS {peak_rss_mib(pid):.0f} MiB")


def timed(label, pipeline, expected_groups, expected_measurements, collection=db.metrics):
    times = []
    for _ in range(3):
        begun = time.time()
        groups = list(collection.aggregate(pipeline))
        times.append(time.time() - begun)
        assert len(groups) == expected_groups, (label, len(groups))
        assert sum(group["n"] for group in groups) == expected_measurements, label
    best, median = min(times), sorted(times)[1]
    print(f"{label}: best {best * 1000:.1f} ms, median {median * 1000:.1f} ms "
          f"({expected_measurements / best:,.0f} measurements/s)")


seconds = n // SENSORS
middle = t0 + datetime.timedelta(seconds=seconds // 2)


def window_pipeline(span):
    return [
        {"$match": {"ts": {"$gte": middle, "$lt": middle + datetime.timedelta(seconds=span)}}},
        {"$group": {"_id": "$sensor.id", "avg": {"$avg": "$temp"}, "n": {"$sum": 1}}},
    ]


for label, window in [("1-minute window", 60), ("1-hour window", 3600)]:
    span = min(window, seconds - seconds // 2)
    timed(
        f"{label} ($match on time, $group by sensor, avg temp)",
        window_pipeline(span),
        SENSORS,
        span * SENSORS,
    )
hours = -(-seconds // 3600)
timed(
    "whole collection by hour ($dateTrunc, $group, avg and max)",
    [
        {"$group": {"_id": {"$dateTrunc": {"date": "$ts", "unit": "hour"}},
                    "avg": {"$avg": "$temp"}, "max": {"$max": "$load"}, "n": {"$sum": 1}}},
    ],
    hours,
    n,
)
print(f"server peak RSS {peak_rss_mib(pid):.0f} MiB")
db.drop_collection("metrics")
db.drop_collection("plain")
plain_s = load(db.plain)
print(f"ordinary collection: inserted {n:,} in {plain_s:.2f} s ({n / plain_s:,.0f} documents/s)")
span = min(60, seconds - seconds // 2)
timed("ordinary collection, 1-minute window (collection scan)", window_pipeline(span), SENSORS,
      span * SENSORS, db.plain)
client.drop_database("timeseries_bench")
