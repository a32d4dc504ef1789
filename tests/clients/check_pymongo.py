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
from dataclasses import dataclass
from typing import Callable

from pymongo import MongoClient
from pymongo.errors import OperationFailure

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


def connect(port: int, compressor: str | None = None) -> MongoClient:
    kwargs = {"serverSelectionTimeoutMS": 3000}
    if compressor:
        kwargs["compressors"] = compressor
    with warnings.catch_warnings():
        # pymongo only warns (and then silently sends uncompressed) when a compressor's module is
        # missing; turn that into an error so a misconfigured run cannot pass by accident.
        warnings.filterwarnings("error", message="Wire protocol compression")
        return MongoClient(uri(port), **kwargs)


def expect_equal(what: str, actual, expected) -> None:
    assert actual == expected, f"{what}: server answered {actual!r}, client expected {expected!r}"


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
