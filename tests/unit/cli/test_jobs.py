"""``shardtrain tfjob render|submit``: options, output and errors."""

from __future__ import annotations

import logging
import os
import sys

import yaml

from helpers import cli_exit_code
from shardtrain import cli
from shardtrain.kubeflow.jobs import tfjob
from tfjob_examples import DATA, MODEL_DIR, make_config, make_manifest

LOGGER = "shardtrain.kubeflow.jobs.tfjob.render"


def _rendered(capsys) -> dict:
    """The YAML `tfjob render` printed; a parse error shows the first lines of stdout (a
    render that printed anything besides the manifest would break `render > job.yaml`)."""
    out = capsys.readouterr().out
    try:
        return yaml.safe_load(out)
    except yaml.YAMLError as exc:
        head = "\n".join(out.splitlines()[:3])
        raise AssertionError(
            f"stdout is not one YAML manifest: {exc}\nfirst lines:\n{head}"
        ) from exc


def test_render_prints_the_generators_yaml(capsys):
    code = cli_exit_code(
        "tfjob", "render", "--data", DATA, "--model-dir", MODEL_DIR, "--workers", "1",
        "--gpus-per-worker", "0", "--no-evaluator", "--secret", "", "--", "--train-steps", "9",
    )  # fmt: skip
    assert code == 0
    expected = make_manifest(
        workers=1,
        gpus_per_worker=0,
        evaluator=False,
        secret=None,
        train_args=("--train-steps", "9"),
    )
    assert _rendered(capsys) == expected


def test_render_warns_when_the_grace_period_is_shorter_than_a_stop_needs(caplog):
    """After SIGTERM a replica needs one step plus a checkpoint write: warn below 30 s.

    Run as a user runs it (``render > job.yaml``), in a process of its own: stdout is
    exactly the manifest, the warning goes to stderr. (In-process, this test twice read a
    first stdout line of ~180 spaces before the YAML, written by something an earlier test
    left running; `render` itself writes nothing else, as this shows.)"""
    import subprocess
    import sys

    done = subprocess.run(
        [
            sys.executable, "-m", "shardtrain.cli", "tfjob", "render", "--data", DATA,
            "--model-dir", MODEL_DIR, "--termination-grace-seconds", "10",
        ],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    pods = [
        spec["template"]["spec"]
        for spec in yaml.safe_load(done.stdout)["spec"]["tfReplicaSpecs"].values()
    ]
    assert {pod["terminationGracePeriodSeconds"] for pod in pods} == {10}
    assert "termination_grace_seconds 10" in done.stderr and "SIGKILL" in done.stderr
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        tfjob.build_tfjob(make_config())  # the default, 120 s
    assert "termination_grace_seconds" not in caplog.text


def test_render_needs_data_and_model_dir(capsys):
    assert cli_exit_code("tfjob", "render", "--data", DATA) == 2
    assert "--model-dir" in capsys.readouterr().err


def test_submit_refuses_job_options_with_a_manifest_file(tmp_path):
    path = tmp_path / "job.yaml"
    path.write_text(tfjob.to_yaml(make_manifest(name="from-file")))
    assert cli_exit_code("tfjob", "submit", "-f", str(path), "--workers", "4") == 2


def test_submit_without_a_cluster_is_one_clear_line(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "none"))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    assert cli_exit_code("tfjob", "submit", "--data", DATA, "--model-dir", MODEL_DIR) == 1
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("error: no Kubernetes configuration")


def test_nothing_here_prints_secret_values(monkeypatch, capsys, caplog, tmp_path):
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "super-secret-value-123")
    with caplog.at_level(logging.DEBUG):
        cli_exit_code("tfjob", "render", "--data", DATA, "--model-dir", MODEL_DIR)
        tfjob.local_replicas(make_manifest())
    assert "super-secret-value-123" not in capsys.readouterr().out + caplog.text
    assert os.environ["AWS_SECRET_ACCESS_KEY"] == "super-secret-value-123"


def test_cli_help_shows_the_manifest_defaults_which_start_up_does_not_read():
    """`tfjob render --help` ends each setting's help with the base manifest's value; just
    importing the CLI reads no manifest (PyYAML, ~30 ms of every command's start-up)."""
    import subprocess

    from click.testing import CliRunner

    text = CliRunner().invoke(cli.cli, ["tfjob", "render", "--help"], terminal_width=200).output
    assert (
        f"Worker replicas besides the chief. [default: {tfjob.JobConfig.default('workers')}]"
        in text
    )
    assert "[default: none]" in text or "[default: no]" in text or "[default: yes]" in text
    code = (
        "import sys, shardtrain.cli; "
        "print(sorted(m for m in ('yaml', 'shardtrain.kubeflow.jobs.tfjob') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_render_writes_the_queue_options(capsys):
    code = cli_exit_code(
        "tfjob", "render", "--data", DATA, "--model-dir", MODEL_DIR,
        "--queue", "gpu-team", "--priority-class", "high",
    )  # fmt: skip
    assert code == 0
    m = _rendered(capsys)
    assert m == make_manifest(queue="gpu-team", priority_class="high")
    code = cli_exit_code(
        "tfjob", "render", "--data", DATA, "--model-dir", MODEL_DIR,
        "--gang-scheduler", "volcano", "--queue", "research",
    )  # fmt: skip
    assert code == 0
    m = _rendered(capsys)
    assert m == make_manifest(gang_scheduler="volcano", queue="research")


def test_the_clis_gang_schedulers_are_the_generators():
    from shardtrain.cli.jobs import tfjob_render_cmd

    (option,) = [p for p in tfjob_render_cmd.params if p.name == "gang_scheduler"]
    assert tuple(option.type.choices) == tfjob.GANG_SCHEDULERS
