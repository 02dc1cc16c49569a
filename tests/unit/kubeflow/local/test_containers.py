"""The node agent's container processes: stopped together, the stubborn ones killed."""

from __future__ import annotations

from shardtrain.kubeflow.local import containers


def test_containers_are_stopped_together_and_the_stubborn_ones_killed(tmp_path):
    import subprocess
    import sys
    import time

    def start(script):
        proc = subprocess.Popen([sys.executable, "-c", script], start_new_session=True)
        return containers.Container("u", "ns", "p", "c", tmp_path / "c.log", proc=proc)

    ready = tmp_path / "ready"
    stubborn = start(
        "import pathlib, signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
        f"pathlib.Path({str(ready)!r}).touch(); time.sleep(600)"
    )
    polite = start("import time; time.sleep(600)")
    while not ready.exists() and stubborn.poll() is None:
        time.sleep(0.01)
    containers.stop_all([stubborn, polite], grace=1)
    assert polite.poll() == 128 + 15  # SIGTERM
    assert stubborn.poll() == 128 + 9  # SIGKILL after the grace period
