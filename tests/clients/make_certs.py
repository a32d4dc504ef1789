"""Test certificate authority and certificates for the TLS and MONGODB-X509 client checks.

Usage: python make_certs.py DIR

Writes, with `trustme` (python-trio's test-CA generator, on pyca `cryptography`), into DIR:
  ca.pem          the test CA's certificate (what clients pass as tlsCAFile, and the server as
                  --tlsCAFile to verify client certificates)
  server.pem      the server's certificate (SAN localhost and 127.0.0.1) and its private key in
                  one PEM, as --tlsCertificateKeyFile wants it
  client.pem      a client certificate and key in one PEM, subject CLIENT_SUBJECT
  client_subject  CLIENT_SUBJECT as the server names the user (RFC 2253, most specific first)

A fresh CA is made on every run: nothing is kept, nothing is trusted beyond the run's folder.
The client's O/OU differ from the server's (trustme's own), so mongod would not take the client
for a cluster member (the manual's x509 client-certificate requirements).
"""

from __future__ import annotations

import pathlib
import sys

import trustme
from cryptography import x509

CLIENT_SUBJECT = "CN=client,OU=tideway,O=test"


def main() -> None:
    if len(sys.argv) != 2:
        sys.exit("usage: make_certs.py DIR")
    out = pathlib.Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    ca = trustme.CA()
    ca.cert_pem.write_to_path(str(out / "ca.pem"))
    server = ca.issue_cert("localhost", "127.0.0.1")
    server.private_key_and_cert_chain_pem.write_to_path(str(out / "server.pem"))
    # trustme names a leaf O, OU, CN in that order, which RFC 2253 writes CN first. The DNS name
    # only keeps the subjectAltName extension non-empty; client certificates are not matched
    # against host names.
    client = ca.issue_cert(
        "client.tideway.test",
        common_name="client",
        organization_unit_name="tideway",
        organization_name="test",
    )
    client.private_key_and_cert_chain_pem.write_to_path(str(out / "client.pem"))
    subject = x509.load_pem_x509_certificate(client.cert_chain_pems[0].bytes()).subject.rfc4514_string()
    if subject != CLIENT_SUBJECT:
        sys.exit(f"make_certs.py: the client certificate's subject is {subject!r}, expected {CLIENT_SUBJECT!r}")
    (out / "client_subject").write_text(CLIENT_SUBJECT + "\n")


if __name__ == "__main__":
    main()
