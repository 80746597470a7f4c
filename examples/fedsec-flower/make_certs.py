"""Make TLS material for a Flower SuperLink: a private CA and a server certificate.

Needs only the ``cryptography`` package (no fedsec, no Flower)::

    python make_certs.py --out certs --host 127.0.0.1 --host localhost \
        --host superlink.example.org

writes ``certs/ca.crt`` (give it to every party and to whoever runs ``flwr run``),
``certs/server.pem`` and ``certs/server.key`` (keep them on the SuperLink machine) and
``certs/ca.key`` (keep it offline; only needed to issue new certificates). ``--host``
values become the certificate's subject alternative names: list every name or IP
address the parties use to reach the SuperLink. Keys are ECDSA P-256, written with
mode 0600. The SuperLink uses server-side TLS only (parties verify the SuperLink).
"""

from __future__ import annotations

import argparse
import ipaddress
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


def _san(host: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        return x509.DNSName(host)


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey) -> None:
    data = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
    path.chmod(0o600)


def make_certs(out: Path, hosts: list[str], days: int = 365) -> None:
    """Write ``ca.crt``, ``ca.key``, ``server.pem`` and ``server.key`` into ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    now = datetime.now(UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "fedsec federation CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(minutes=5))
        .not_valid_after(now + timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(digital_signature=True, content_commitment=False,
                          key_encipherment=False, data_encipherment=False,
                          key_agreement=False, key_cert_sign=True, crl_sign=True,
                          encipher_only=False, decipher_only=False),
            critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()),
                       critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, hosts[0])]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(minutes=5))
        .not_valid_after(now + timedelta(days=days))
        .add_extension(x509.SubjectAlternativeName([_san(h) for h in hosts]), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]),
                       critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(
            ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    (out / "ca.crt").write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    (out / "server.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    _write_key(out / "ca.key", ca_key)
    _write_key(out / "server.key", key)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("certs"), help="output directory")
    parser.add_argument("--host", action="append", default=[],
                        help="SuperLink DNS name or IP (repeatable); default 127.0.0.1 "
                             "and localhost")
    parser.add_argument("--days", type=int, default=365, help="validity (default 365)")
    args = parser.parse_args()
    hosts = args.host or ["127.0.0.1", "localhost"]
    make_certs(args.out, hosts, args.days)
    print(f"wrote {args.out}/ca.crt, server.pem, server.key, ca.key for {', '.join(hosts)}")


if __name__ == "__main__":
    main()
