"""A local run's session (:func:`shardtrain.kubeflow.client.local_session`) leaves its process
as it found it: ``print`` its own after the steps of a ``ParallelFor`` ran at once (the demo
failed in numba's import, one run in four), and nothing in ``$TMPDIR``, whether the run
succeeded or failed.

The steps are two tiny Python components in one ``ParallelFor``, as the pipeline's two shard
workers are; the first to start ends first, the order in which kfp.local's own swaps of
``print`` leave one behind. A fresh Python runs them, so that numba is imported afterwards
as in the demo's summary (numba types ``print`` at import).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

pytestmark = [pytest.mark.slow]

RUN = textwrap.dedent(
    """
    import builtins, sys
    from kfp import dsl, local
    from shardtrain.kubeflow import client

    @dsl.component(base_image="python:3.11", install_kfp_package=False)
    def step(seconds: float, fail: bool) -> str:
        import time
        time.sleep(seconds)
        if fail:
            raise SystemExit(1)
        return "done"

    @dsl.pipeline
    def fan_out(fail: bool):
        # Two at once; the first to start ends first.
        with dsl.ParallelFor([0.0, 4.0]) as seconds:
            step(seconds=seconds, fail=fail)

    root, fail, session = sys.argv[1], sys.argv[2] == "fail", sys.argv[3]
    before = builtins.print
    assert "numba" not in sys.modules
    try:
        if session == "shardtrain":
            with client.local_session(root):
                fan_out(fail=fail)
        else:  # kfp.local's own session: what run_local did before
            local.init(runner=local.SubprocessRunner(use_venv=False), pipeline_root=root)
            fan_out(fail=fail)
    except RuntimeError:
        assert fail
    sys.stderr.write(f"print restored: {builtins.print is before}\\n")
    import numba  # noqa: F401  - fails when print is not builtins' own
    """
)


def _run(tmp_path, outcome: str, session: str = "shardtrain") -> tuple[int, str, list[str]]:
    """Run the two steps in a fresh Python with ``TMPDIR`` an empty folder: its exit code,
    stderr and what the folder holds afterwards."""
    script = tmp_path / "fan_out.py"  # kfp reads the components' source from a file
    script.write_text(RUN)
    scratch = tmp_path / f"tmp-{outcome}"
    scratch.mkdir()
    done = subprocess.run(
        [sys.executable, str(script), str(tmp_path / f"runs-{outcome}"), outcome, session],
        capture_output=True,
        text=True,
        env={**os.environ, "TMPDIR": str(scratch)},
        timeout=300,
    )
    return done.returncode, done.stderr, sorted(p.name for p in scratch.iterdir())


@pytest.mark.parametrize("outcome", ["pass", "fail"])
def test_parallel_steps_leave_print_and_tmpdir_as_they_were(tmp_path, outcome):
    code, stderr, left = _run(tmp_path, outcome)
    assert code == 0, stderr[-3000:]
    assert "print restored: True" in stderr
    assert left == []
