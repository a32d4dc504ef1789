"""Authentication, authorization and TLS checks with pymongo against a fresh tideway server.

Usage: python check_auth_pymongo.py PORT TLS_DIR

The server (tests/clients/run.sh) runs with --auth and --tlsMode requireTLS, its certificate
and the client certificate signed by the test CA in TLS_DIR (make_certs.py), --tlsCAFile and
--tlsAllowConnectionsWithoutCertificates, and has no user yet: the first check uses the localhost
exception, so the checks run once, in order, each building on the users the earlier ones made.

Expected values are mongod's, from the manual: 18 AuthenticationFailed for a wrong password,
13 Unauthorized for a command the client lacks the privilege for (unauthenticated, or a role
that does not grant it), the localhost exception closing once the first user exists
(core/localhost-exception), MONGODB-X509 users in `$external` named by the certificate's RFC 2253
subject (core/security-x.509). Messages are mongod's too: `Authentication failed.`, `command <name>
requires authentication` and `not authorized on <db> to execute command …`
(src/mongo/db/commands.cpp).

Prints `PASS name` / `FAIL name` (indented details) per check; exits non-zero if any failed.
"""

from __future__ import annotations

import pathlib
import re
import sys
import traceback
from typing import Callable

from pymongo import MongoClient
from pymongo.errors import OperationFailure, PyMongoError, ServerSelectionTimeoutError

HOST = "127.0.0.1"
ADMIN_USER, ADMIN_PWD = "admin", "admin-pw"
PASSWORD = "user-pw"
# name -> (mechanisms, roles); all in the admin database.
USERS = {
    "scram256": (["SCRAM-SHA-256"], [{"role": "read", "db": "authA"}]),
    "scram1": (["SCRAM-SHA-1"], [{"role": "read", "db": "authA"}]),
    "reader": (["SCRAM-SHA-256", "SCRAM-SHA-1"], [{"role": "read", "db": "authA"}]),
    "writerA": (["SCRAM-SHA-256", "SCRAM-SHA-1"], [{"role": "readWrite", "db": "authA"}]),
}
UNAUTHORIZED, AUTHENTICATION_FAILED = 13, 18


def unauthenticated(command: str) -> str:
    """mongod's message for a command that needs a login (src/mongo/db/commands.cpp; "command" is
    capitalised in newer versions)."""
    return rf"^command {command} requires authentication"


def not_authorized(db: str) -> str:
    """mongod's message for a command the logged-in users' roles do not grant (commands.cpp)."""
    return rf"^not authorized on {re.escape(db)} to execute command "


CHECKS: list[Callable[["Env"], None]] = []


def check(fn: Callable[["Env"], None]) -> Callable[["Env"], None]:
    CHECKS.append(fn)
    return fn


class Env:
    def __init__(self, port: int, tls_dir: pathlib.Path) -> None:
        self.port = port
        self.ca = str(tls_dir / "ca.pem")
        self.client_pem = str(tls_dir / "client.pem")
        self.client_subject = (tls_dir / "client_subject").read_text().strip()

    def client(self, tls: bool = True, ca: bool = True, **options) -> MongoClient:
        kwargs = {"directConnection": True, "serverSelectionTimeoutMS": 3000, **options}
        if tls:
            kwargs["tls"] = True
            if ca:
                kwargs["tlsCAFile"] = self.ca
        return MongoClient(f"mongodb://{HOST}:{self.port}/", **kwargs)

    def user(self, name: str, password: str = PASSWORD, **options) -> MongoClient:
        return self.client(username=name, password=password, authSource="admin", **options)

    def admin(self) -> MongoClient:
        return self.user(ADMIN_USER, ADMIN_PWD, authMechanism="SCRAM-SHA-256")


def expect_error(
    what: str, run: Callable[[], object], code: int, code_name: str, message: str | None = None
) -> OperationFailure:
    """`run()` must fail with `code`/`code_name` and, if given, an errmsg matching `message`."""
    try:
        result = run()
    except OperationFailure as err:
        details = err.details or {}
        assert err.code == code and details.get("codeName") == code_name, (
            f"{what}: failed with code {err.code} {details.get('codeName')!r} ({details!r}), "
            f"expected {code} {code_name!r}"
        )
        errmsg = str(details.get("errmsg", ""))
        assert message is None or re.search(message, errmsg, re.IGNORECASE), (
            f"{what}: errmsg {errmsg!r} does not match mongod's {message!r}"
        )
        return err
    raise AssertionError(f"{what}: succeeded ({result!r}), expected error {code} {code_name}")


def authenticated_users(client: MongoClient) -> list[dict]:
    status = client.admin.command("connectionStatus")
    return [
        {"user": u.get("user"), "db": u.get("db")}
        for u in status.get("authInfo", {}).get("authenticatedUsers", [])
    ]


def expect_tls_refused(what: str, client: MongoClient, needle: str) -> None:
    try:
        client.admin.command("ping")
    except ServerSelectionTimeoutError as err:
        assert needle.lower() in str(err).lower(), f"{what}: refused, but not for {needle!r}: {err}"
        return
    finally:
        client.close()
    raise AssertionError(f"{what}: ping succeeded")


# --- TLS -----------------------------------------------------------------------------------------


@check
def tls_plain_connection_refused(env: Env) -> None:
    # requireTLS: the server closes a connection that does not open a TLS handshake.
    expect_tls_refused("plain connection", env.client(tls=False, serverSelectionTimeoutMS=1000), "")


@check
def tls_untrusted_without_ca_file(env: Env) -> None:
    # Without tlsCAFile the system trust store is used, which does not hold the test CA.
    client = env.client(ca=False, serverSelectionTimeoutMS=1000)
    expect_tls_refused("tls without the test CA", client, "certificate verify failed")


@check
def tls_connect_with_ca_file(env: Env) -> None:
    with env.client() as client:
        reply = client.admin.command("ping")  # ping needs no authentication in mongod
        assert reply.get("ok") == 1.0, f"ping: {reply!r}"


# --- localhost exception -------------------------------------------------------------------------


@check
def localhost_exception_creates_first_user(env: Env) -> None:
    with env.client() as client:
        reply = client.admin.command(
            "createUser", ADMIN_USER, pwd=ADMIN_PWD, roles=[{"role": "root", "db": "admin"}]
        )
        assert reply.get("ok") == 1.0, f"createUser: {reply!r}"


@check
def localhost_exception_closed_after_first_user(env: Env) -> None:
    with env.client() as client:
        expect_error(
            "unauthenticated find",
            lambda: client.authA.items.find_one(),
            UNAUTHORIZED,
            "Unauthorized",
            unauthenticated("find"),
        )
        expect_error(
            "unauthenticated listDatabases",
            lambda: client.admin.command("listDatabases"),
            UNAUTHORIZED,
            "Unauthorized",
            unauthenticated("listDatabases"),
        )
        expect_error(
            "unauthenticated second createUser",
            lambda: client.admin.command("createUser", "intruder", pwd="x", roles=[]),
            UNAUTHORIZED,
            "Unauthorized",
            unauthenticated("createUser"),
        )


# --- SCRAM ---------------------------------------------------------------------------------------


@check
def admin_creates_users(env: Env) -> None:
    with env.admin() as admin:
        users = authenticated_users(admin)
        assert users == [{"user": ADMIN_USER, "db": "admin"}], f"connectionStatus users: {users!r}"
        for name, (mechanisms, roles) in USERS.items():
            admin.admin.command("createUser", name, pwd=PASSWORD, roles=roles, mechanisms=mechanisms)
        admin.authA.items.insert_one({"_id": 1, "db": "authA"})
        admin.authB.items.insert_one({"_id": 1, "db": "authB"})


def expect_scram(env: Env, user: str, mechanism: str) -> None:
    with env.user(user, authMechanism=mechanism) as client:
        users = authenticated_users(client)
        assert users == [{"user": user, "db": "admin"}], f"connectionStatus users: {users!r}"
        doc = client.authA.items.find_one({"_id": 1})
        assert doc == {"_id": 1, "db": "authA"}, f"find as {user}: {doc!r}"


@check
def scram_sha_256_authenticates(env: Env) -> None:
    expect_scram(env, "scram256", "SCRAM-SHA-256")


@check
def scram_sha_1_authenticates(env: Env) -> None:
    expect_scram(env, "scram1", "SCRAM-SHA-1")


def expect_wrong_password(env: Env, user: str, mechanism: str) -> None:
    with env.user(user, password="wrong-pw", authMechanism=mechanism) as client:
        expect_error(
            f"{mechanism} with a wrong password",
            lambda: client.admin.command("ping"),
            AUTHENTICATION_FAILED,
            "AuthenticationFailed",
            r"^Authentication failed\.$",
        )


@check
def wrong_password_scram_sha_256_is_18(env: Env) -> None:
    expect_wrong_password(env, "scram256", "SCRAM-SHA-256")


@check
def wrong_password_scram_sha_1_is_18(env: Env) -> None:
    expect_wrong_password(env, "scram1", "SCRAM-SHA-1")


# --- authorization -------------------------------------------------------------------------------


@check
def read_role_finds_but_cannot_insert(env: Env) -> None:
    with env.user("reader") as client:
        doc = client.authA.items.find_one({"_id": 1})
        assert doc == {"_id": 1, "db": "authA"}, f"find as a read user: {doc!r}"
        expect_error(
            "insert as a read user",
            lambda: client.authA.items.insert_one({"_id": 2}),
            UNAUTHORIZED,
            "Unauthorized",
            not_authorized("authA"),
        )


@check
def read_write_role_is_limited_to_its_database(env: Env) -> None:
    with env.user("writerA") as client:
        client.authA.items.insert_one({"_id": "writerA"})
        doc = client.authA.items.find_one({"_id": "writerA"})
        assert doc == {"_id": "writerA"}, f"find of its own insert: {doc!r}"
        expect_error(
            "find on authB as a readWrite@authA user",
            lambda: client.authB.items.find_one(),
            UNAUTHORIZED,
            "Unauthorized",
            not_authorized("authB"),
        )
        expect_error(
            "insert on authB as a readWrite@authA user",
            lambda: client.authB.items.insert_one({"_id": "writerA"}),
            UNAUTHORIZED,
            "Unauthorized",
            not_authorized("authB"),
        )


# --- MONGODB-X509 --------------------------------------------------------------------------------


@check
def x509_user_created_in_external(env: Env) -> None:
    with env.admin() as admin:
        reply = admin["$external"].command(
            "createUser", env.client_subject, roles=[{"role": "readWrite", "db": "authA"}]
        )
        assert reply.get("ok") == 1.0, f"createUser in $external: {reply!r}"


@check
def x509_client_certificate_authenticates(env: Env) -> None:
    with env.client(tlsCertificateKeyFile=env.client_pem, authMechanism="MONGODB-X509") as client:
        users = authenticated_users(client)
        assert users == [{"user": env.client_subject, "db": "$external"}], f"connectionStatus users: {users!r}"
        client.authA.items.insert_one({"_id": "x509"})
        expect_error(
            "find on authB as the x509 user",
            lambda: client.authB.items.find_one(),
            UNAUTHORIZED,
            "Unauthorized",
            not_authorized("authB"),
        )


def main() -> int:
    if len(sys.argv) != 3:
        print("usage: check_auth_pymongo.py PORT TLS_DIR", file=sys.stderr)
        return 2
    env = Env(int(sys.argv[1]), pathlib.Path(sys.argv[2]))
    failed = 0
    for fn in CHECKS:
        name = f"pymongo-auth/{fn.__name__}"
        try:
            fn(env)
        except Exception as err:  # noqa: BLE001
            failed += 1
            print(f"FAIL {name}")
            if isinstance(err, AssertionError):
                lines = (str(err) or "assertion failed").splitlines()
            elif isinstance(err, PyMongoError):  # the server's or the driver's own words suffice
                lines = [f"{type(err).__name__}: {err}"]
            else:
                lines = "".join(traceback.format_exception(type(err), err, err.__traceback__)).rstrip().splitlines()
            for line in lines:
                print(f"    {line}")
        else:
            print(f"PASS {name}")
        sys.stdout.flush()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
