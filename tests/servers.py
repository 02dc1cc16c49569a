"""The test servers both test tiers start: MinIO (scripts/minio-up) and the kubectl runner of
the control plane, shared by tests/conftest.py and tests/cluster."""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"

AWS_VARS = (
    "AWS_ENDPOINT_URL",
    "AWS_ENDPOINT_URL_S3",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_REGION",
    "AWS_DEFAULT_REGION",
    "AWS_PROFILE",
)


@dataclass
class MinioServer:
    """A live MinIO server started by scripts/minio-up for this test session."""

    state_dir: Path
    env: dict[str, str]
    bucket: str

    @property
    def endpoint(self) -> str:
        return self.env["AWS_ENDPOINT_URL"]

    def uri(self, *parts: str) -> str:
        """An s3:// URI in the session bucket under a fresh prefix when no parts are given."""
        key = "/".join(parts) if parts else f"t-{uuid.uuid4().hex[:10]}"
        return f"s3://{self.bucket}/{key}"

    def _script(self, name: str, **extra: str) -> str:
        env = {**os.environ, "SHARDTRAIN_MINIO_STATE": str(self.state_dir), **extra}
        out = subprocess.run(
            [str(SCRIPTS / name)], env=env, check=True, capture_output=True, text=True
        )
        sys.stderr.write(out.stderr)
        return out.stdout

    def kill(self) -> None:
        """SIGKILL the server (its data and credentials are kept for :meth:`restart`)."""
        pid = int((self.state_dir / "pid").read_text())
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:  # not our child: poll until it is gone
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.05)
        raise RuntimeError(f"MinIO pid {pid} survived SIGKILL")

    def restart(self) -> None:
        """Start the server again on the same port, data and credentials."""
        self._script("minio-up", SHARDTRAIN_MINIO_RESUME="1")

    def s3_client(self):
        import boto3

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id=self.env["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=self.env["AWS_SECRET_ACCESS_KEY"],
            region_name="us-east-1",
        )


def parse_exports(text: str) -> dict[str, str]:
    env = {}
    for line in text.splitlines():
        if line.startswith("export "):
            name, _, value = line[len("export ") :].partition("=")
            env[name] = shlex.split(value)[0] if value else ""
    return env


@contextlib.contextmanager
def running_minio(state: Path, bucket: str, host: str = "127.0.0.1") -> Iterator[MinioServer]:
    """A MinIO server of scripts/minio-up listening on ``host`` (state in ``state``), with
    ``bucket`` created; this process's AWS_* variables point at it until the block ends, and
    the server is stopped (scripts/minio-down) then."""
    import pytest

    env = {**os.environ, "SHARDTRAIN_MINIO_STATE": str(state), "SHARDTRAIN_MINIO_HOST": host}
    out = subprocess.run(
        [str(SCRIPTS / "minio-up")], env=env, capture_output=True, text=True, timeout=1200
    )
    if out.returncode != 0:
        pytest.fail(f"scripts/minio-up failed:\n{out.stderr}")
    server = MinioServer(state_dir=state, env=parse_exports(out.stdout), bucket=bucket)
    saved = {name: os.environ.get(name) for name in AWS_VARS}
    for name in AWS_VARS:
        os.environ.pop(name, None)
    os.environ.update(server.env)
    try:
        server.s3_client().create_bucket(Bucket=server.bucket)
        yield server
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        subprocess.run([str(SCRIPTS / "minio-down")], env=env, check=False)


def run_kubectl(
    kubectl: str,
    kubeconfig: str,
    *args: str,
    input: str | None = None,
    check: bool = True,
    timeout: float = 120,
) -> subprocess.CompletedProcess[str]:
    """``kubectl ARGS`` against the cluster of ``kubeconfig``; an AssertionError with its output
    when it fails and ``check``."""
    out = subprocess.run(
        [kubectl, "--kubeconfig", kubeconfig, "--request-timeout", "60s", *args],
        input=input,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if check and out.returncode != 0:
        raise AssertionError(f"kubectl {' '.join(args)} failed:\n{out.stdout}{out.stderr}")
    return out
