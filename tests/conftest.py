"""Shared fixtures: real MinIO and GCS-emulator servers for the test session, and small helpers.

Two tiers, one per folder: ``tests/unit`` is the fast tier (pure Python and compiled kernels
on tiny data, no TensorFlow, no servers: ``make test-fast``); ``tests/integration`` holds
everything with TensorFlow, CLI processes, real servers and clusters. The markers say what an
integration test needs: ``minio`` (the live MinIO server), ``gcs`` (the live fake-gcs-server),
``k8s`` (the live control plane), ``cluster`` (multi-process TensorFlow clusters), ``slow``
(more than a few seconds); a unit test carries none of them.

The MinIO fixture starts its own server exactly the way users do (``scripts/minio-up``), in a
private state directory, with fresh credentials, and stops it at the end of the session.
Nothing in the suite fakes S3. Likewise ``gcs_server`` starts fake-gcs-server with
``scripts/gcs-up`` (the emulator gcsfs is itself tested with); the function-scoped ``gcs``
fixture points ``STORAGE_EMULATOR_HOST`` at it for one test only, because under an emulator
``gs://`` no longer goes to TensorFlow (:func:`shardtrain.storage.tf_can_open`), which other
tests of the session check. And the ``k8s`` fixture starts a real Kubernetes control plane
(``scripts/k8s-up``: kube-apiserver, kube-controller-manager, the Kubeflow training operator,
JobSet, Kubeflow Trainer and Kueue) without a node: what the API server, the controllers and
their webhooks do with our objects is tested here; pods that must run are run by a real kubelet
in the cluster tier (``tests/cluster``, ``make test-cluster``).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from helpers import ALL_TYPES
from servers import MinioServer, parse_exports, run_kubectl, running_minio

REPO = Path(__file__).resolve().parents[1]
SCRIPTS = REPO / "scripts"


@pytest.fixture(scope="session")
def minio(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MinioServer]:
    """A live MinIO server with a fresh bucket; AWS_* variables point at it for the session."""
    with running_minio(tmp_path_factory.mktemp("minio-state"), "shardtrain-test") as server:
        yield server


@dataclass
class GcsServer:
    """A live fake-gcs-server started by scripts/gcs-up for this test session."""

    state_dir: Path
    env: dict[str, str]
    bucket: str

    @property
    def endpoint(self) -> str:
        return self.env["STORAGE_EMULATOR_HOST"]

    def uri(self, *parts: str) -> str:
        """A gs:// URI in the session bucket under a fresh prefix when no parts are given."""
        key = "/".join(parts) if parts else f"t-{uuid.uuid4().hex[:10]}"
        return f"gs://{self.bucket}/{key}"

    def kill(self) -> None:
        """SIGKILL the server (its data is kept for :meth:`restart`)."""
        pid = int((self.state_dir / "pid").read_text())
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.05)
        raise RuntimeError(f"fake-gcs-server pid {pid} survived SIGKILL")

    def restart(self) -> None:
        """Start the server again on the same port and data."""
        env = {**os.environ, "SHARDTRAIN_GCS_STATE": str(self.state_dir)}
        env["SHARDTRAIN_GCS_RESUME"] = "1"
        out = subprocess.run(
            [str(SCRIPTS / "gcs-up")], env=env, check=True, capture_output=True, text=True
        )
        sys.stderr.write(out.stderr)


@pytest.fixture(scope="session")
def gcs_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GcsServer]:
    """A live fake-gcs-server with a fresh bucket (the environment is left alone: see ``gcs``)."""
    state = tmp_path_factory.mktemp("gcs-state")
    bucket = "shardtrain-test"
    env = {**os.environ, "SHARDTRAIN_GCS_STATE": str(state), "GCS_BUCKET": bucket}
    out = subprocess.run(
        [str(SCRIPTS / "gcs-up")], env=env, capture_output=True, text=True, timeout=1200
    )
    if out.returncode != 0:
        pytest.fail(f"scripts/gcs-up failed:\n{out.stderr}")
    try:
        yield GcsServer(state_dir=state, env=parse_exports(out.stdout), bucket=bucket)
    finally:
        subprocess.run([str(SCRIPTS / "gcs-down")], env=env, check=False)


@pytest.fixture
def gcs(gcs_server: GcsServer, monkeypatch: pytest.MonkeyPatch) -> GcsServer:
    """The session's fake-gcs-server, with STORAGE_EMULATOR_HOST and GOOGLE_CLOUD_PROJECT
    pointing at it for this test (and the processes it starts)."""
    monkeypatch.delenv("GOOGLE_APPLICATION_CREDENTIALS", raising=False)
    for name, value in gcs_server.env.items():
        monkeypatch.setenv(name, value)
    return gcs_server


@pytest.fixture
def fast_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    """Short, bounded storage retries so failure tests finish in seconds."""
    monkeypatch.setenv("SHARDTRAIN_STORAGE_RETRIES", "3")
    monkeypatch.setenv("SHARDTRAIN_STORAGE_BACKOFF", "0.2")
    monkeypatch.setenv("SHARDTRAIN_STORAGE_CONNECT_TIMEOUT", "1")


@pytest.fixture(scope="module")
def all_types(tmp_path_factory):
    """tests/data/all_types.csv sharded uncompressed (columnar blocks, the default): every
    type, missing values, quotes."""
    from shardtrain.data import sharding

    out = str(tmp_path_factory.mktemp("ds") / "all_types")
    meta = sharding.shard(
        sharding.ShardConfig(
            sources=(str(ALL_TYPES),),
            output=out,
            label="cleared",
            key="id",
            compression="none",
            num_shards=1,
            processes=1,
            max_bad_fraction=1.0,
        )
    ).metadata
    return out, meta


@dataclass
class ControlPlane:
    """A live control plane (scripts/k8s-up) for this test session, without a node: the
    controllers create pods and nothing runs them (they stay Pending). Tests whose pods must
    run are in tests/cluster, on a real kubelet."""

    state_dir: Path
    kubeconfig: str

    @property
    def kubectl_path(self) -> str:
        """The kubectl scripts/install-k8s built (the same release as the API server)."""
        env = (self.state_dir / "env").read_text()
        return re.search(r"^KUBECTL=(.*)$", env, re.M).group(1)

    def kubectl(
        self, *args: str, input: str | None = None, check: bool = True, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        """Run kubectl against the control plane (as its admin)."""
        return run_kubectl(
            self.kubectl_path, self.kubeconfig, *args, input=input, check=check, timeout=timeout
        )

    def core(self):
        """A CoreV1Api client (admin)."""
        from kubernetes import client, config

        return client.CoreV1Api(config.new_client_from_config(config_file=self.kubeconfig))

    def namespace(self, prefix: str = "t", *, service_accounts: tuple[str, ...] = ()) -> str:
        """A fresh namespace with the given service accounts and ``default`` (which
        kube-controller-manager's serviceaccount controller creates: waited for)."""
        ns = f"{prefix}-{uuid.uuid4().hex[:8]}"
        self.kubectl("create", "namespace", ns)
        for sa in service_accounts:
            self.kubectl("create", "serviceaccount", sa, "-n", ns)
        deadline = time.monotonic() + 30
        while self.kubectl("get", "serviceaccount", "default", "-n", ns, check=False).returncode:
            assert time.monotonic() < deadline, f"no default ServiceAccount in {ns} after 30 s"
            time.sleep(0.2)
        return ns


@pytest.fixture(scope="session")
def k8s(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    """A live control plane (kube-apiserver, kube-controller-manager, training operator, JobSet,
    Trainer, and Kueue as root) without a node.

    KUBECONFIG points at it for the session. The first session on a machine builds the
    binaries (scripts/install-k8s; ``make test`` does that before pytest starts).
    """
    state = tmp_path_factory.mktemp("k8s-state")
    env = {**os.environ, "SHARDTRAIN_K8S_STATE": str(state)}
    out = subprocess.run(
        [str(SCRIPTS / "k8s-up")], env=env, capture_output=True, text=True, timeout=3600
    )
    if out.returncode != 0:
        subprocess.run([str(SCRIPTS / "k8s-down")], env=env, check=False)
        pytest.fail(f"scripts/k8s-up failed:\n{out.stderr}")
    sys.stderr.write(out.stderr)
    plane = ControlPlane(state, parse_exports(out.stdout)["KUBECONFIG"])
    saved = os.environ.get("KUBECONFIG")
    try:
        os.environ["KUBECONFIG"] = plane.kubeconfig
        yield plane
    finally:
        if saved is None:
            os.environ.pop("KUBECONFIG", None)
        else:
            os.environ["KUBECONFIG"] = saved
        subprocess.run([str(SCRIPTS / "k8s-down")], env=env, check=False)


_RESOURCE_MARKERS = ("minio", "gcs", "k8s", "cluster", "slow")


#: The test files that use the ``k8s`` fixture (the control plane, a session fixture): under
#: ``make test``'s xdist they run on one worker, so one control plane starts. Checked against
#: the collected tests below, so a new file that needs the control plane is added here.
_CONTROL_PLANE_FILES = frozenset(
    f"tests/integration/kubeflow/{name}.py"
    for name in (
        "jobs/test_kueue",
        "jobs/test_tfjob",
        "jobs/test_trainjob",
        "test_preflight",
        "test_serving_crd",
    )
)


@pytest.hookimpl(tryfirst=True, optionalhook=True)  # before xdist picks its scheduler
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    """``--dist loadfile`` with the control plane's files as one group.

    A file's tests run on one worker, so its module-scoped fixtures (trained models, shared
    runs) are built once, and every file in :data:`_CONTROL_PLANE_FILES` runs on one worker.
    (xdist's ``--dist loadgroup`` would do it with markers, but pytest 9 keeps a node id
    where xdist 3.8 cannot append the group to it, so its groups silently do nothing.)
    """
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class ByFile(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            return "control-plane" if path in _CONTROL_PLANE_FILES else path

    return ByFile(config, log)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Folders and markers agree: no unit test needs a server, a cluster or much time; the
    tests that use the control plane are in :data:`_CONTROL_PLANE_FILES`."""
    uses = {i.nodeid.split("::", 1)[0] for i in items if "k8s" in getattr(i, "fixturenames", ())}
    unlisted = sorted(uses - _CONTROL_PLANE_FILES)
    if unlisted:
        raise pytest.UsageError(
            "tests/conftest.py: add to _CONTROL_PLANE_FILES (they use the k8s fixture): "
            + ", ".join(unlisted)
        )
    unit = config.rootpath / "tests" / "unit"
    wrong = [
        f"{item.nodeid} ({m})"
        for item in items
        if unit in item.path.parents
        for m in _RESOURCE_MARKERS
        if item.get_closest_marker(m)
    ]
    if wrong:
        raise pytest.UsageError(
            "tests/unit is the fast tier; move these to tests/integration: " + ", ".join(wrong)
        )


class _CurrentStderr:
    """``sys.stderr`` as it is at each write, for log handlers left holding a closed stream.

    A handler made while a test captures its output (TensorFlow gives its ``tensorflow``
    logger a ``StreamHandler`` of ``sys.stderr`` on first use when the root logger has none;
    ``logging.basicConfig`` likewise) keeps that test's captured stream, which is closed when
    the test ends; every later line through it then prints "--- Logging error ---" and a
    traceback into whichever test is running, and a test that asserts its stderr holds no
    traceback fails in the full suite, never alone.
    """

    def write(self, text: str) -> int:
        return sys.stderr.write(text)

    def flush(self) -> None:
        sys.stderr.flush()


def pytest_runtest_setup(item: pytest.Item) -> None:
    import contextlib
    import logging

    loggers = [logging.root, *logging.root.manager.loggerDict.values()]
    for logger in loggers:
        for handler in getattr(logger, "handlers", ()):
            stream = getattr(handler, "stream", None)
            if (
                isinstance(handler, logging.StreamHandler)
                and not isinstance(handler, logging.FileHandler)
                and getattr(stream, "closed", False)
            ):
                # Not setStream: it flushes the old stream first, which raises once closed.
                with handler.lock or contextlib.nullcontext():
                    handler.stream = _CurrentStderr()
