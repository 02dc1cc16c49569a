"""The S3 filesystem's settings come from the environment only (never from code or files)."""

from __future__ import annotations

import subprocess
import sys

from shardtrain import storage


def test_s3_settings_come_from_the_environment_only(monkeypatch):
    for name in (
        "AWS_ENDPOINT_URL",
        "AWS_ENDPOINT_URL_S3",
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_REGION",
        "AWS_DEFAULT_REGION",
    ):
        monkeypatch.delenv(name, raising=False)
    bare = storage.s3_settings()
    assert "key" not in bare and "endpoint_url" not in bare["client_kwargs"]
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://general:9000")
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", "http://s3-specific:9000")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "id")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "very-secret")
    monkeypatch.setenv("AWS_REGION", "eu-west-1")
    s = storage.s3_settings()
    assert s["client_kwargs"] == {
        "endpoint_url": "http://s3-specific:9000",
        "region_name": "eu-west-1",
    }
    assert s["config_kwargs"]["s3"] == {"addressing_style": "path"}
    assert (s["key"], s["secret"]) == ("id", "very-secret")
    assert "very-secret" not in storage.describe_s3_settings()


def test_import_client_imports_s3fs_and_connects_to_nothing():
    """What a sharder forking its pool relies on: the client library is loaded (the pool's
    processes share it) and no thread exists yet (the fork stays safe)."""
    code = (
        "import sys, threading\n"
        "from shardtrain import storage\n"
        "storage.import_client('s3://some-bucket/data/*.csv')\n"
        "storage.import_client('/local/path')\n"
        "print('s3fs' in sys.modules, threading.active_count())\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True", "1"]
