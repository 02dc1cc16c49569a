"""Local processes of a job (the run-local runner): TF_CONFIG of the operator's shape, log prefixes,
failures."""

from __future__ import annotations

import io
import json
import sys
import time

import pytest

from shardtrain.errors import ConfigError
from shardtrain.kubeflow.local import processes

FAIL_WORKER_1 = (
    "import json, os, sys; i = json.loads(os.environ['TF_CONFIG'])['task']['index'];"
    "print('worker', i, 'failing' if i == 1 else 'ok'); sys.exit(3 if i == 1 else 0)"
)
PRINT_TF_CONFIG = "import os; print('TF_CONFIG=' + os.environ.get('TF_CONFIG', 'none'))"


def _py(code: str) -> tuple[str, ...]:
    return (sys.executable, "-c", code)


def _configs(text: str) -> dict[str, dict | None]:
    found = {}
    for line in text.splitlines():
        prefix, _, rest = line.partition("] ")
        if rest.startswith("TF_CONFIG="):
            value = rest.removeprefix("TF_CONFIG=")
            found[prefix.lstrip("[")] = None if value == "none" else json.loads(value)
    return found


def test_tf_config_has_the_operators_shape_for_every_replica():
    out = io.StringIO()
    result = processes.run_local(
        [
            processes.Replica("chief", 1, _py(PRINT_TF_CONFIG)),
            processes.Replica("worker", 2, _py(PRINT_TF_CONFIG)),
            processes.Replica("evaluator", 1, _py(PRINT_TF_CONFIG)),
        ],
        out=out,
        grace=5,
    )
    assert result.succeeded and result.exit_code == 0, result.reason
    configs = _configs(out.getvalue())
    assert sorted(configs) == ["chief-0", "evaluator-0", "worker-0", "worker-1"]
    cluster = configs["chief-0"]["cluster"]
    # The operator's order (checked against it in tests/integration/kubeflow/jobs/test_tfjob.py).
    assert list(cluster) == ["chief", "evaluator", "worker"]
    assert len(cluster["worker"]) == 2 and len(cluster["evaluator"]) == 1
    addresses = [a for v in cluster.values() for a in v]
    assert len(set(addresses)) == 4 and all(a.startswith("127.0.0.1:") for a in addresses)
    for name, cfg in configs.items():
        kind, index = name.rsplit("-", 1)
        assert cfg["task"] == {"type": kind, "index": int(index)}
        assert cfg["environment"] == "cloud" and cfg["cluster"] == cluster


def test_single_replica_gets_no_tf_config(monkeypatch):
    monkeypatch.setenv("TF_CONFIG", '{"stale": true}')
    out = io.StringIO()
    result = processes.run_local([processes.Replica("worker", 1, _py(PRINT_TF_CONFIG))], out=out)
    assert result.succeeded
    assert _configs(out.getvalue()) == {"worker-0": None}


def test_a_failing_worker_fails_the_job_and_stops_the_others():
    out = io.StringIO()
    result = processes.run_local(
        [
            processes.Replica("chief", 1, _py("import time; time.sleep(60)")),
            processes.Replica("worker", 2, _py(FAIL_WORKER_1)),
        ],
        out=out,
        grace=5,
    )
    assert not result.succeeded
    assert result.reason == "worker-1 exited with code 3"
    assert result.exit_code == 3
    codes = {r.name: r.exit_code for r in result.replicas}
    assert codes["chief-0"] == -15  # stopped with SIGTERM
    assert "[worker-1] worker 1 failing" in out.getvalue()


def test_a_retryable_stop_lets_the_peers_end_by_themselves_before_stopping_them():
    """A replica that exits 143 (SIGTERM after a checkpoint) or another retryable code: its
    peers leave the loop at the same step and exit on their own, a slower one too (a full
    suite saw a chief still writing its checkpoint killed by the runner's SIGTERM: -15)."""
    slow_143 = "import time, sys; time.sleep(1); sys.exit(143)"
    start = time.monotonic()
    result = processes.run_local(
        [
            processes.Replica("chief", 1, _py(slow_143)),
            processes.Replica("worker", 1, _py("import sys; sys.exit(143)")),
            processes.Replica("evaluator", 1, _py("import time; time.sleep(60)")),
        ],
        out=io.StringIO(),
        grace=30,
    )
    took = time.monotonic() - start
    assert not result.succeeded and result.reason == "worker-0 exited with code 143"
    codes = {r.name: r.exit_code for r in result.replicas}
    assert codes["chief-0"] == 143, codes
    # The evaluator is no peer (it would wait for checkpoints to the end): stopped as soon as
    # the peers ended, not after the grace period.
    assert codes["evaluator-0"] == -15, codes
    assert took < 20, took


def test_chief_decides_and_the_evaluator_is_stopped_after_the_grace_period():
    result = processes.run_local(
        [
            processes.Replica("chief", 1, _py("print('trained')")),
            processes.Replica("evaluator", 1, _py("import time; time.sleep(60)")),
        ],
        out=io.StringIO(),
        grace=1,
    )
    assert result.succeeded and result.reason == "succeeded"


def test_timeout_fails_the_job():
    result = processes.run_local(
        [
            processes.Replica("chief", 1, _py("import time; time.sleep(60)")),
            processes.Replica("worker", 1, _py("import time; time.sleep(60)")),
        ],
        out=io.StringIO(),
        timeout=1,
        grace=2,
    )
    assert not result.succeeded and result.reason == "timed out after 1s"


def test_invalid_jobs():
    with pytest.raises(ConfigError, match="both a chief and a master"):
        processes.local_cluster(
            [processes.Replica("chief", 1, ("x",)), processes.Replica("master", 1, ("x",))]
        )
    with pytest.raises(ConfigError, match="unknown replica type 'boss'"):
        processes.Replica("boss", 1, ("x",))
    with pytest.raises(ConfigError, match="at least 1"):
        processes.Replica("worker", 0, ("x",))


def test_run_local_cli_runs_shardtrain_replicas_and_propagates_failure():
    from helpers import run_cli

    ok = run_cli("run-local", "--workers", "1", "--evaluator", "--grace", "2", "--", "--version")
    assert ok.returncode == 0, ok.stderr
    for name in ("chief-0", "worker-0", "evaluator-0"):
        assert f"[{name}] shardtrain, version" in ok.stdout
    bad = run_cli("run-local", "--workers", "1", "--", "no-such-command")
    assert bad.returncode == 2
    assert bad.stderr.strip().splitlines()[-1].startswith("error: local job failed: ")
