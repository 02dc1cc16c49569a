"""The chief's TrainJob status reports over real HTTPS: a local server in the shape of
Trainer's status server (``pkg/statusserver``: ``POST .../trainjobs/<name>/status``, a bearer
token, TLS from its own CA, 403 for a token it does not accept); last, ``shardtrain train``
itself reporting to it as a TrainJob's chief does."""

from __future__ import annotations

import datetime
import http.server
import json
import logging
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from helpers import run_cli
from shardtrain.data import datagen, sharding
from shardtrain.train.status_report import StatusReport

PATH = "/apis/trainer.kubeflow.org/v1alpha1/namespaces/ns/trainjobs/quest/status"
TOKEN = "projected-token-for-quest"


def _ca_and_server_cert(directory: Path) -> tuple[Path, Path, Path]:
    """A CA and a serving certificate for 127.0.0.1 that it signed (as Trainer's cert
    manager makes for its webhook service)."""
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "trainer-ca")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
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
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), False)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), False
        )
        .sign(ca_key, hashes.SHA256())
    )
    pem = serialization.Encoding.PEM
    ca_path, cert_path, key_path = (directory / n for n in ("ca.crt", "tls.crt", "tls.key"))
    ca_path.write_bytes(ca.public_bytes(pem))
    cert_path.write_bytes(cert.public_bytes(pem))
    key_path.write_bytes(
        key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return ca_path, cert_path, key_path


class StatusServer:
    """Records the JSON of every accepted report; 403 for another token or path."""

    def __init__(self, directory: Path):
        self.ca, cert, key = _ca_and_server_cert(directory)
        self.bodies: list[dict] = []
        self.refused = 0
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, format, *args):
                pass

            def do_POST(self):
                body = self.rfile.read(int(self.headers["Content-Length"]))
                ok = (
                    self.path == PATH
                    and self.headers["Authorization"] == f"Bearer {TOKEN}"
                    and self.headers["Content-Type"] == "application/json"
                )
                if ok:
                    server.bodies.append(json.loads(body))
                else:
                    server.refused += 1
                self.send_response(200 if ok else 403)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(body if ok else b'{"reason": "Forbidden"}')

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key)
        self.httpd.socket = context.wrap_socket(self.httpd.socket, server_side=True)
        self.url = f"https://127.0.0.1:{self.httpd.server_address[1]}{PATH}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()


@pytest.fixture
def server(tmp_path) -> Iterator[StatusServer]:
    s = StatusServer(tmp_path)
    yield s
    s.httpd.shutdown()
    s.httpd.server_close()


def _environ(tmp_path: Path, url: str, ca: Path, token: str = TOKEN) -> dict[str, str]:
    token_file = tmp_path / "token"
    token_file.write_text(token)
    return {
        "SHARDTRAIN_TRAINJOB": "quest",
        "KUBEFLOW_TRAINER_SERVER_URL": url,
        "KUBEFLOW_TRAINER_SERVER_CA_CERT": str(ca),
        "KUBEFLOW_TRAINER_SERVER_TOKEN": str(token_file),
    }


def test_reports_reach_the_status_server_over_tls_with_the_projected_token(tmp_path, server):
    report = StatusReport.from_environ(_environ(tmp_path, server.url, server.ca), interval=0)
    report.progress(50, 200, {"loss": 0.5})
    report.evaluated({"task": "binary", "step": 50, "auc": 0.8})
    report.finish(200, 200)
    assert report.reports == 3 and server.refused == 0
    first, _, last = (b["trainerStatus"] for b in server.bodies)
    assert first["progressPercentage"] == 25
    assert last["progressPercentage"] == 100 and last["estimatedRemainingSeconds"] == 0
    assert {"name": "eval_auc", "value": "0.8"} in last["metrics"]


def test_a_refused_token_stops_reporting_with_one_warning(tmp_path, server, caplog):
    env = _environ(tmp_path, server.url, server.ca, token="another-jobs-token")
    report = StatusReport.from_environ(env, interval=0)
    for step in range(1, 11):
        report.progress(step, 10)
    report.finish(10, 10)
    assert server.refused == 1 and server.bodies == [] and not report.enabled
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and "HTTP 403" in warnings[0]


def test_a_server_whose_certificate_the_ca_did_not_sign_gets_no_report(tmp_path, server, caplog):
    (tmp_path / "other").mkdir()
    other_ca, _, _ = _ca_and_server_cert(tmp_path / "other")
    report = StatusReport.from_environ(_environ(tmp_path, server.url, other_ca), interval=0)
    for step in range(1, 6):
        report.progress(step, 5)
    assert server.bodies == [] and not report.enabled  # given up after 3 TLS failures
    assert "CERTIFICATE_VERIFY_FAILED" in caplog.records[0].getMessage()


def test_an_unreachable_server_costs_training_little(tmp_path, server, caplog):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    url = f"https://127.0.0.1:{port}{PATH}"
    report = StatusReport.from_environ(_environ(tmp_path, url, server.ca), interval=0)
    started = time.monotonic()
    for step in range(1, 21):
        report.progress(step, 20)
    report.finish(20, 20)
    assert time.monotonic() - started < 5
    assert not report.enabled
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 2 and "3 times in a row" in warnings[1]


# ------------------------------------------------------------------------------------------
# `shardtrain train` as a TrainJob's chief
# ------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def quest_data(tmp_path_factory) -> str:
    work = tmp_path_factory.mktemp("quest")
    datagen.generate_quest_logs(str(work / "quest.csv"), 3000, seed=3)
    out = str(work / "ds")
    sharding.shard(
        sharding.ShardConfig(
            sources=(str(work / "quest.csv"),), output=out, label="cleared", key="attempt_id",
            processes=1,
        )
    )  # fmt: skip
    return out


TRAIN = ("--train-steps", "60", "--batch-size", "64", "--checkpoint-every", "20")
#: A one-node TrainJob's chief: what JobSet, the Job controller and Trainer give node 0.
NODE = {
    "SHARDTRAIN_TRAINJOB": "quest",
    "SHARDTRAIN_REPLICATED_JOB": "node",
    "SHARDTRAIN_JOB_INDEX": "0",
    "JOB_COMPLETION_INDEX": "0",
    "JAX_NUM_PROCESSES": "1",
}


def test_training_reports_progress_eval_metrics_and_the_end(tmp_path, server, quest_data):
    env = {**NODE, **_environ(tmp_path, server.url, server.ca)}
    proc = run_cli(
        "train", "--data", quest_data, "--model-dir", str(tmp_path / "model"), *TRAIN,
        "--eval-every", "20", env=env, timeout=600,
    )  # fmt: skip
    text = proc.stdout + proc.stderr
    assert proc.returncode == 0, text[-4000:]
    assert "TrainJob status" not in text, text[-4000:]  # no warning: every report landed
    statuses = [b["trainerStatus"] for b in server.bodies]
    assert statuses and server.refused == 0
    assert statuses[0]["progressPercentage"] < 100
    last = statuses[-1]
    assert last["progressPercentage"] == 100 and last["estimatedRemainingSeconds"] == 0
    metrics = {m["name"]: m["value"] for m in last["metrics"]}
    assert metrics["step"] == "60/60" and metrics["eval_step"] == "60"
    assert 0 < float(metrics["eval_auc"]) <= 1 and float(metrics["train_loss"]) > 0


def test_a_trainjob_chief_without_the_feature_gate_trains_and_says_so_once(tmp_path, quest_data):
    env = NODE  # no KUBEFLOW_TRAINER_SERVER_*: the gate is off
    proc = run_cli(
        "train", "--data", quest_data, "--model-dir", str(tmp_path / "model"), *TRAIN,
        env=env, timeout=600,
    )  # fmt: skip
    text = proc.stdout + proc.stderr
    assert proc.returncode == 0, text[-4000:]
    assert "trained to step 60" in text
    assert text.count("TrainJob status: progress is not reported") == 1, text[-4000:]
    assert "TrainJobStatus feature gate is off" in text
