"""The node agent's log endpoint: what ``kubectl logs`` reaches through the API server.

It serves ``/containerLogs/<namespace>/<pod>/<container>`` (``follow``, ``tailLines``,
``limitBytes``, ``previous``) and ``/healthz`` over TLS on 127.0.0.1, as a kubelet does, to the
API server only: the client must present a certificate signed by the cluster CA (the API
server's kubelet client certificate). The endpoint's own certificate is self-signed (the API
server does not check a kubelet's certificate unless given ``--kubelet-certificate-authority``).
"""

from __future__ import annotations

import datetime
import http.server
import logging
import os
import ssl
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from shardtrain.kubeflow.local.containers import Container, ended

log = logging.getLogger(__name__)

#: The runs of a container, oldest first: (namespace, pod, container) → runs.
Runs = Callable[[str, str, str], list[Container]]


class LogEndpoint:
    """Serves the logs of the containers ``runs`` finds (see the module documentation)."""

    def __init__(self, name: str, log_dir: Path, ca_pem: str, runs: Runs) -> None:
        """``name``: the node's (the certificate's subject); ``log_dir``: where its key goes;
        ``ca_pem``: the cluster CA clients must be signed by."""
        self._name, self._log_dir, self._ca_pem, self._runs = name, log_dir, ca_pem, runs
        self._server: http.server.ThreadingHTTPServer | None = None

    def start(self, port: int) -> int:
        """Serve on 127.0.0.1:``port`` (0: a free one) in a thread; returns the port."""
        endpoint = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                log.debug("log endpoint: " + format, *args)

            def do_GET(self) -> None:
                endpoint._handle(self)

        server = http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler)
        server.daemon_threads = True
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        cert, key = self_signed(self._name, self._log_dir)
        ctx.load_cert_chain(cert, key)
        # Only the API server (its kubelet client certificate, signed by the cluster CA).
        ctx.verify_mode = ssl.CERT_REQUIRED
        ctx.load_verify_locations(cadata=self._ca_pem)
        server.socket = ctx.wrap_socket(server.socket, server_side=True)
        self._server = server
        threading.Thread(target=server.serve_forever, name="node-logs", daemon=True).start()
        return server.server_address[1]

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    def _handle(self, req: http.server.BaseHTTPRequestHandler) -> None:
        url = urllib.parse.urlsplit(req.path)
        parts = url.path.strip("/").split("/")
        query = dict(urllib.parse.parse_qsl(url.query))
        if url.path == "/healthz":
            reply(req, 200, b"ok")
            return
        if len(parts) != 4 or parts[0] != "containerLogs":
            reply(req, 404, b"not found")
            return
        _, ns, pod, container = parts
        runs = self._runs(ns, pod, container)
        if not runs:
            reply(req, 404, f"no container {container} of pod {ns}/{pod} here".encode())
            return
        c = runs[-1]
        path = c.log_path
        if query.get("previous") == "true":
            if c.restarts == 0:
                reply(req, 400, f"previous terminated container {container} not found".encode())
                return
            path = c.log_path.with_name(f"{c.name}-{c.restarts - 1}.log")
        if not path.exists():  # the container never started
            reply(req, 400, f"container {container} of pod {ns}/{pod} never started".encode())
            return
        follow = query.get("follow") == "true" and path == c.log_path
        tail = int(query["tailLines"]) if query.get("tailLines") else None
        limit = int(query["limitBytes"]) if query.get("limitBytes") else None
        req.send_response(200)
        req.send_header("Content-Type", "text/plain")
        req.send_header("Connection", "close")
        req.end_headers()
        sent = 0
        try:
            for chunk in read_log(path, tail=tail, follow=follow, ended=lambda: ended(c, path)):
                if limit is not None:
                    chunk = chunk[: max(0, limit - sent)]
                req.wfile.write(chunk)
                req.wfile.flush()
                sent += len(chunk)
                if limit is not None and sent >= limit:
                    break
        except (BrokenPipeError, ConnectionResetError, ssl.SSLError):
            pass


def read_log(path: Path, *, tail: int | None, follow: bool, ended: Any) -> Iterator[bytes]:
    """A log file's bytes (its last ``tail`` lines), then (``follow``) what is appended until
    the process has ended."""
    with open(path, "rb") as f:
        data = f.read()
        if tail is not None:
            lines = data.splitlines(keepends=True)
            data = b"".join(lines[-tail:]) if tail > 0 else b""
        if data:
            yield data
        while follow:
            finished = ended()
            chunk = f.read(65536)
            if chunk:
                yield chunk
                continue
            if finished:
                return
            time.sleep(0.2)


def reply(req: http.server.BaseHTTPRequestHandler, code: int, body: bytes) -> None:
    req.send_response(code)
    req.send_header("Content-Type", "text/plain")
    req.send_header("Content-Length", str(len(body)))
    req.end_headers()
    req.wfile.write(body)


def self_signed(name: str, directory: Path) -> tuple[str, str]:
    """A fresh self-signed serving certificate for 127.0.0.1 (the API server does not check a
    kubelet's certificate unless given --kubelet-certificate-authority)."""
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=30))
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName(name)]
            ),
            critical=False,
        )
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = directory / "node.crt", directory / "node.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    fd = os.open(key_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )
    return str(cert_path), str(key_path)
