"""The chief's reports into its TrainJob's status: when they go out, what they say, and that
nothing the status server does (or lacks) reaches training. The transport is a fake here;
tests/integration/train/test_status_report.py sends them over HTTPS to a local server."""

from __future__ import annotations

import logging

import pytest

from shardtrain.train import status_report
from shardtrain.train.controller import Controller, LoopOutput, StopFlag
from shardtrain.train.status_report import StatusReport
from training_fakes import Recorder

URL = "https://trainer.kubeflow-system.svc:10443/apis/trainer.kubeflow.org/v1alpha1/namespaces/ns/trainjobs/quest/status"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Server:
    """Records every report; answers ``codes`` in turn (then 200), or raises ``errors``."""

    def __init__(self, *codes: int, error: OSError | None = None):
        self.codes = list(codes)
        self.error = error
        self.requests: list[dict] = []

    def __call__(self, url, body, headers, ca_file, timeout) -> int:
        import json

        self.requests.append(
            {"url": url, "body": json.loads(body), "headers": dict(headers), "ca": ca_file}
        )
        if self.error is not None:
            raise self.error
        return self.codes.pop(0) if self.codes else 200

    @property
    def statuses(self) -> list[dict]:
        return [r["body"]["trainerStatus"] for r in self.requests]


def _reporter(tmp_path, server, clock=None, interval=30) -> StatusReport:
    token = tmp_path / "token"
    token.write_text("projected-token\n")
    return StatusReport(
        URL,
        token_file=str(token),
        ca_file="/ca.crt",
        interval=interval,
        clock=clock or Clock(),
        post=server,
    )


def _metrics(status: dict) -> dict[str, str]:
    return {m["name"]: m["value"] for m in status.get("metrics", ())}


def test_reports_go_out_at_most_every_interval_and_the_last_one_always(tmp_path):
    clock, server = Clock(), Server()
    report = _reporter(tmp_path, server, clock)
    report.progress(0, 1000)  # the first report at once
    for step in range(10, 300, 10):  # 29 loops in 29 s: all within the interval
        clock.now += 1
        report.progress(step, 1000, {"loss": 0.5})
    assert len(server.requests) == 1
    clock.now += 1  # 30 s after the first report
    report.progress(300, 1000, {"loss": 0.25})
    clock.now += 0.5
    report.finish(1000, 1000)  # within the interval, yet sent
    assert [s["progressPercentage"] for s in server.statuses] == [0, 30, 100]
    assert server.statuses[-1]["estimatedRemainingSeconds"] == 0
    request = server.requests[0]
    assert request["url"] == URL and request["ca"] == "/ca.crt"
    assert request["headers"]["Authorization"] == "Bearer projected-token"
    assert report.reports == 3


def test_the_payload_has_progress_eta_and_the_latest_train_and_eval_metrics(tmp_path):
    clock, server = Clock(), Server()
    report = _reporter(tmp_path, server, clock)
    report.progress(200, 1000)  # resumed from a checkpoint at step 200
    clock.now += 40
    report.progress(400, 1000, {"loss": 0.123456789, "accuracy": 0.875})
    # 200 steps in 40 s: the 600 left take 120 s; the restored steps are not counted as done.
    status = server.statuses[-1]
    assert status["progressPercentage"] == 40
    assert status["estimatedRemainingSeconds"] == 120
    assert _metrics(status) == {
        "step": "400/1000",
        "train_loss": "0.123457",
        "train_accuracy": "0.875",
    }
    assert status["lastUpdatedTime"].endswith("Z") and "T" in status["lastUpdatedTime"]
    clock.now += 40
    report.evaluated(
        {"task": "binary", "step": 400, "auc": 0.91, "accuracy": 0.8, "log_loss": 0.4,
         "num_examples": 5000, "split": "eval", "data": "s3://b/d"}
    )  # fmt: skip
    metrics = _metrics(server.statuses[-1])
    assert {k: v for k, v in metrics.items() if k.startswith("eval_")} == {
        "eval_auc": "0.91",
        "eval_accuracy": "0.8",
        "eval_log_loss": "0.4",
        "eval_step": "400",
    }
    assert metrics["train_loss"] == "0.123457"  # the latest of each kept
    # Trainer's limits: names and values of at most 64 characters, at most 256 metrics.
    report.progress(500, 1000, {f"m{i}" + "x" * 80: 1.0 for i in range(300)})
    report.finish(500, 1000)
    last = server.statuses[-1]
    assert len(last["metrics"]) == 256
    assert all(len(m["name"]) <= 64 and len(m["value"]) <= 64 for m in last["metrics"])
    assert last["progressPercentage"] == 50  # an interrupted run is not 100% done


def test_outside_a_trainjob_nothing_is_sent_or_logged(caplog):
    caplog.set_level(logging.INFO, "shardtrain.train.trainer")
    report = StatusReport.from_environ({}, post=Server())
    assert not report.enabled
    report.progress(1, 10)
    report.finish(10, 10)
    assert caplog.records == []


def test_in_a_trainjob_without_the_feature_gate_the_log_says_so_once(caplog):
    caplog.set_level(logging.INFO, "shardtrain.train.trainer")
    server = Server()
    report = StatusReport.from_environ({"SHARDTRAIN_TRAINJOB": "quest"}, post=server)
    for step in range(5):
        report.progress(step, 5)
    report.finish(5, 5)
    assert server.requests == [] and not report.enabled
    (record,) = caplog.records
    assert "KUBEFLOW_TRAINER_SERVER_URL" in record.getMessage()
    assert "TrainJobStatus feature gate is off" in record.getMessage()


def test_the_environment_trainer_gives_a_node_is_read():
    env = {
        "KUBEFLOW_TRAINER_SERVER_URL": URL,
        "KUBEFLOW_TRAINER_SERVER_CA_CERT": "/var/run/secrets/kubeflow/trainer/ca.crt",
        "KUBEFLOW_TRAINER_SERVER_TOKEN": "/var/run/secrets/kubeflow/trainer/token",
    }
    report = StatusReport.from_environ(env)
    assert (report.url, report.ca_file, report.token_file) == (
        URL,
        "/var/run/secrets/kubeflow/trainer/ca.crt",
        "/var/run/secrets/kubeflow/trainer/token",
    )


@pytest.mark.parametrize("code", [401, 403, 404])
def test_a_refusal_stops_reporting_with_one_warning(tmp_path, caplog, code):
    clock, server = Clock(), Server(code)
    report = _reporter(tmp_path, server, clock)
    report.progress(1, 100)
    for step in range(2, 100):
        clock.now += 60
        report.progress(step, 100)
    report.finish(100, 100)
    assert len(server.requests) == 1 and not report.enabled
    (record,) = [r for r in caplog.records if r.name == "shardtrain.train.trainer"]
    assert record.levelno == logging.WARNING
    assert f"HTTP {code}" in record.getMessage()
    assert "training is unaffected" in record.getMessage()


def test_an_unreachable_server_is_retried_then_given_up_with_two_lines(tmp_path, caplog):
    clock = Clock()
    server = Server(error=TimeoutError("timed out"))
    report = _reporter(tmp_path, server, clock)
    for step in range(10):
        report.progress(step, 10)
        clock.now += 60
    report.finish(10, 10)
    assert len(server.requests) == status_report.MAX_FAILURES
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 2
    assert "retrying" in messages[0] and "timed out" in messages[0]
    assert "3 times in a row" in messages[1] and "no longer reported" in messages[1]


def test_a_server_error_between_successes_is_forgiven(tmp_path):
    clock, server = Clock(), Server(200, 500, 500, 200, 500, 500, 200)
    report = _reporter(tmp_path, server, clock)
    for step in range(7):
        report.progress(step, 100)
        clock.now += 60
    assert report.enabled and report.reports == 3


def test_a_missing_token_file_never_raises(tmp_path):
    server = Server()
    report = StatusReport(URL, token_file=str(tmp_path / "none"), post=server, clock=Clock())
    for _ in range(5):
        report.finish(1, 1)
    assert server.requests == [] and not report.enabled


def test_the_controller_reports_every_loop_each_evaluation_and_the_end(tmp_path):
    """The hook: a controller run with a reporter sends progress, the eval metrics the
    evaluate function returns, and a final 100% (interval 0: every report goes out)."""
    server = Server()
    report = _reporter(tmp_path, server, interval=0)
    steps = iter(range(1, 1000))

    class Steps:
        step = 0

        def __call__(self, n: int) -> LoopOutput:
            self.step += n
            next(steps)
            return LoopOutput(self.step, 0.5 * n * 4, 0.75 * n * 4, 1e-3)

    rec = Recorder()

    def evaluate(step, final):
        rec.evaluate(step, final)
        return {"task": "binary", "step": step, "auc": 0.75}

    controller = Controller(
        Steps(),
        train_steps=100,
        steps_per_loop=25,
        checkpoint_every=50,
        eval_every=50,
        global_batch=4,
        save=rec.save,
        vote=rec.vote,
        stop=StopFlag(),
        evaluate=evaluate,
        status=report,
    )
    assert controller.run(0) == 100
    statuses = server.statuses
    assert [s["progressPercentage"] for s in statuses] == [25, 50, 50, 75, 100, 100, 100]
    assert _metrics(statuses[2])["eval_auc"] == "0.75"
    assert _metrics(statuses[2])["eval_step"] == "50"
    assert _metrics(statuses[-1]) == {
        "step": "100/100",
        "train_loss": "0.5",
        "train_accuracy": "0.75",
        "train_examples_per_second": _metrics(statuses[-1])["train_examples_per_second"],
        "train_learning_rate": "0.001",
        "eval_auc": "0.75",
        "eval_step": "100",
    }
