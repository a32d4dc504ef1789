"""$lookup join benchmark (issue 11 target): N orders joined with 10,000 inventory documents on an
indexed foreign field, for N = 10,000 and 100,000; prints the best and median of 3 runs.

Usage: target/clients/venv/bin/python bench/scripts/lookup_join.py mongodb://127.0.0.1:PORT
(start a release server first, e.g. target/release/tideway --port PORT --storage memory).
"""

import random
import sys
import time

from pymongo import MongoClient

client = MongoClient(sys.argv[1] if len(sys.argv) > 1 else "mongodb://127.0.0.1:27017",
                     directConnection=True)
db = client.lookup_bench
random.seed(7)
db.inventory.drop()
db.inventory.insert_many([{"_id": i, "sku": f"sku{i}", "instock": i % 50} for i in range(10000)])
db.inventory.create_index("sku")
for n in (10000, 100000):
    db.orders.drop()
    orders = [{"_id": i, "item": f"sku{random.randrange(10000)}", "qty": 1} for i in range(n)]
    for start in range(0, n, 10000):
        db.orders.insert_many(orders[start:start + 10000])
    times = []
    for _ in range(3):
        started = time.time()
        out = list(db.orders.aggregate([
            {"$lookup": {"from": "inventory", "localField": "item", "foreignField": "sku",
                         "as": "inv"}},
            {"$match": {"inv.instock": {"$gte": 0}}},
            {"$count": "n"},
        ], allowDiskUse=True))
        times.append(time.time() - started)
    print(f"{n} x 10000: joined {out[0]['n']}, best {min(times):.2f} s, "
          f"median {sorted(times)[1]:.2f} s")
client.drop_database("lookup_bench")
