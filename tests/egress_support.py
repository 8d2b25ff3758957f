"""Local upstreams for egress tests and the benchmark: HTTP and HTTPS servers on
127.0.0.1 only, a test CA made on the fly, and a tiny PEP 503 package index.

Nothing here resolves a real name or leaves 127.0.0.0/8: tests point test domains
(`*.test`) at these servers through `StaticResolver`, inside the proxy.
"""

from __future__ import annotations

import base64
import contextlib
import datetime
import functools
import hashlib
import http.server
import io
import ssl
import threading
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

BIG_CHUNK = b"x" * (64 * 1024)


@functools.cache
def pattern(n: int) -> bytes:
    """`n` bytes that never repeat a block (a lost, doubled or reordered chunk shows);
    the same function in a sandbox: `hashlib.shake_256(b"warden relay").digest(n)`."""
    return hashlib.shake_256(b"warden relay").digest(n)


@dataclass
class LocalCA:
    """A CA and one leaf certificate for the given names (PEM files in `directory`)."""

    ca_file: Path
    cert_file: Path
    key_file: Path


def make_ca(directory: Path, names: list[str]) -> LocalCA:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "warden test CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(
            x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    leaf = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[0])]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(n) for n in names]), False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
            critical=False,
        )
        .add_extension(x509.ExtendedKeyUsage([x509.OID_SERVER_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    directory.mkdir(parents=True, exist_ok=True)
    pem = serialization.Encoding.PEM
    ca_file, cert_file, key_file = (
        directory / "ca.pem",
        directory / "cert.pem",
        directory / "key.pem",
    )
    ca_file.write_bytes(ca.public_bytes(pem))
    cert_file.write_bytes(leaf.public_bytes(pem))
    key_file.write_bytes(
        key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    for path in (ca_file, cert_file, key_file):
        path.chmod(0o644)
    return LocalCA(ca_file, cert_file, key_file)


def make_wheel(name: str, version: str) -> tuple[str, bytes]:
    """A minimal valid pure-Python wheel (file name, bytes)."""
    dist = f"{name}-{version}"
    files = {
        f"{name}/__init__.py": b"VALUE = 42\n",
        f"{dist}.dist-info/METADATA": (
            f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
        ).encode(),
        f"{dist}.dist-info/WHEEL": (
            b"Wheel-Version: 1.0\nGenerator: warden-tests\nRoot-Is-Purelib: true\n"
            b"Tag: py3-none-any\n"
        ),
    }
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        record = []
        for path, data in files.items():
            zf.writestr(path, data)
            digest = hashlib.sha256(data).digest()
            b64 = base64.urlsafe_b64encode(digest).rstrip(b"=").decode()
            record.append(f"{path},sha256={b64},{len(data)}")
        record.append(f"{dist}.dist-info/RECORD,,")
        zf.writestr(f"{dist}.dist-info/RECORD", "\n".join(record) + "\n")
    return f"{dist}-py3-none-any.whl", buf.getvalue()


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    wheels: ClassVar[dict[str, tuple[str, bytes]]] = {}

    def log_message(self, format: str, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        if path.startswith("/bytes/"):
            self._stream(int(path.rsplit("/", 1)[1]))
            return
        if path.startswith("/pattern/"):
            body = pattern(int(path.rsplit("/", 1)[1]))
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            with contextlib.suppress(OSError):  # a byte cap may cut the connection
                self.wfile.write(body)
            return
        if path.startswith("/simple/"):
            self._index(path)
            return
        if path.startswith("/files/"):
            for filename, data in self.wheels.values():
                if path == f"/files/{filename}":
                    self._send(200, data, "application/octet-stream")
                    return
        if path == "/hello":
            host = self.headers.get("Host", "")
            self._send(200, f"hello from {host}\n".encode(), "text/plain")
            return
        self._send(404, b"not found\n", "text/plain")

    def _index(self, path: str) -> None:
        project = path.removeprefix("/simple/").strip("/")
        if not project:
            links = "".join(f'<a href="/simple/{p}/">{p}</a>' for p in self.wheels)
        elif project in self.wheels:
            filename, data = self.wheels[project]
            digest = hashlib.sha256(data).hexdigest()
            links = f'<a href="/files/{filename}#sha256={digest}">{filename}</a>'
        else:
            self._send(404, b"no such project\n", "text/plain")
            return
        self._send(200, f"<html><body>{links}</body></html>".encode(), "text/html")

    def _send(self, status: int, body: bytes, kind: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _stream(self, n: int) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(n))
        self.end_headers()
        left = n
        try:
            while left > 0:
                chunk = BIG_CHUNK[: min(left, len(BIG_CHUNK))]
                self.wfile.write(chunk)
                left -= len(chunk)
        except OSError:
            pass


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True


@contextmanager
def upstream(tls: LocalCA | None = None, *, hello_retry: bool = False) -> Iterator[int]:
    """An HTTP (or, with `tls`, HTTPS) server on 127.0.0.1; yields its port. With
    `hello_retry` the server accepts only the P-256 group, so a client that offers
    an X25519 key share first (OpenSSL's default) gets a HelloRetryRequest."""
    server = _Server(("127.0.0.1", 0), _Handler)
    if tls is not None:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(tls.cert_file, tls.key_file)
        if hello_retry:
            ctx.set_ecdh_curve("prime256v1")
        server.socket = ctx.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield int(server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()


def publish_wheel(name: str, version: str) -> str:
    """Serve a wheel named `name` from every test index; returns its file name."""
    filename, data = make_wheel(name, version)
    _Handler.wheels[name] = (filename, data)
    return filename
