"""The trainer end to end: real processes, real TensorFlow clusters on localhost, live MinIO.

Every run goes through the ``shardtrain`` command (and multi-replica runs through
``shardtrain run-local``, the TFJob-shaped local launcher), exactly as a TFJob's pods run it.
The data is ``gen-data quest`` logs: a good model reaches an eval AUC of about 0.85.

The tests that assert an AUC run the trainer with ``TF_DETERMINISTIC_OPS=1``
(``helpers.DETERMINISTIC_TF``) and its default seed 0: every run on one machine gives the
same AUC (checked: single process 0.8610 twice, chief + 2 workers 0.8677 twice). Other
machines' CPU kernels may move it a little; each bar sits far below the spread measured
over other data seeds (``gen-data quest --seed``) and trainer seeds (``--seed``) —
perturbations much larger than a machine's — on local shards (the same training as MinIO's).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

import psutil
import pytest

from helpers import DETERMINISTIC_TF, run_cli
from shardtrain import storage
from shardtrain.data import datagen, sharding
from shardtrain.errors import PEER_LOST_EXIT_CODE

pytestmark = [pytest.mark.slow, pytest.mark.cluster]

ROWS = 20_000
#: Small and quick, yet enough for AUC >= 0.80 on quest logs. Measured, single process, 12
#: runs (data/trainer seeds 21/0 five times, 201-207/1-7; one under taskset -c 0, 2 without
#: TF_DETERMINISTIC_OPS): min 0.838, median 0.850, max 0.867 (0.861 on this module's data).
TRAIN = ("--train-steps", "300", "--batch-size", "128", "--checkpoint-every", "100")


@pytest.fixture(scope="module")
def quest_csv(tmp_path_factory) -> str:
    path = str(tmp_path_factory.mktemp("quest") / "quest.csv")
    datagen.generate_quest_logs(path, ROWS, seed=21)
    return path


@pytest.fixture(scope="module")
def local_data(quest_csv, tmp_path_factory) -> str:
    out = str(tmp_path_factory.mktemp("ds") / "quest")
    sharding.shard(
        sharding.ShardConfig(
            sources=(quest_csv,), output=out, label="cleared", key="attempt_id", processes=1
        )
    )
    return out


@pytest.fixture(scope="module")
def minio_data(minio, quest_csv) -> str:
    out = minio.uri("trainer-data")
    sharding.shard(
        sharding.ShardConfig(
            sources=(quest_csv,), output=out, label="cleared", key="attempt_id", processes=1
        )
    )
    return out


def _check(proc: subprocess.CompletedProcess) -> str:
    text = proc.stdout + proc.stderr
    assert proc.returncode == 0, text[-4000:]
    return text


def _metrics(model_dir: str) -> dict:
    return storage.read_json(storage.join(model_dir, "eval", "metrics.json"))


SCORE_CSV = """
import json, sys
import numpy as np
import tensorflow as tf
export, csv_path, samples_path = sys.argv[1:]
model = tf.saved_model.load(export)
want = {}
for line in open(samples_path):
    s = json.loads(line)
    want[s["key"]] = s["probabilities"]
lines = {}
with open(csv_path) as f:
    next(f)
    for line in f:
        key = line.split(",", 1)[0]
        if key in want:
            lines[key] = line.rstrip("\\n")
keys = sorted(lines)
out = model.signatures["predict_csv"](lines=tf.constant([lines[k] for k in keys]))
got = out["probabilities"].numpy()
diff = max(float(np.abs(got[i] - np.array(want[k])).max()) for i, k in enumerate(keys))
print(json.dumps({"rows": len(keys), "max_diff": diff}))
"""


@pytest.mark.minio
def test_single_process_trains_on_minio_exports_and_serves_raw_csv(
    minio, minio_data, quest_csv, tmp_path
):
    """AUC bar 0.80: measured 12 runs, min 0.838, median 0.850 (see TRAIN)."""
    model_dir = minio.uri("model-single")
    train = ("train", "--data", minio_data, "--model-dir", model_dir, *TRAIN)
    text = _check(run_cli(*train, env=DETERMINISTIC_TF))
    assert "local, single replica" in text
    metrics = _metrics(model_dir)
    assert metrics["step"] == 300 and metrics["auc"] >= 0.80, metrics
    assert set(metrics) >= {"auc", "accuracy", "log_loss", "confusion_matrix", "roc"}
    assert storage.exists(storage.join(model_dir, "train_config.yaml"))
    assert storage.walk_files(storage.join(model_dir, "logs", "train"))  # TensorBoard events
    latest = storage.read_json(storage.join(model_dir, "checkpoints", "latest.json"))
    assert latest["step"] == 300 and latest["final"]

    # The same command again: the job is complete, nothing happens.
    again = _check(run_cli(*train, env=DETERMINISTIC_TF))
    assert "nothing to do" in again

    # The export, in a fresh process, scores raw CSV lines exactly like the trained model.
    export = storage.read_json(storage.join(model_dir, "export", "latest.json"))
    local_export = str(tmp_path / "export")
    storage.download_dir(storage.join(model_dir, export["path"]), local_export)
    samples = str(tmp_path / "samples.jsonl")
    storage.download_file(storage.join(model_dir, "eval", "sample_predictions.jsonl"), samples)
    proc = subprocess.run(
        [sys.executable, "-c", SCORE_CSV, local_export, quest_csv, samples],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    scored = json.loads(proc.stdout.strip().splitlines()[-1])
    assert scored["rows"] == 200
    assert scored["max_diff"] < 1e-5


@pytest.mark.minio
def test_chief_two_workers_and_evaluator_on_minio(minio, minio_data):
    """AUC bar 0.80: measured 6 runs of this job at 300 steps (data/trainer seeds 21/0 three
    times, one of them without TF_DETERMINISTIC_OPS, 201-203/1-3): min 0.839, median 0.856,
    max 0.868; it now trains 600."""
    model_dir = minio.uri("model-cluster")
    command = (
        "run-local",
        "--workers",
        "2",
        "--evaluator",
        "--timeout",
        "600",
        "--grace",
        "60",
        "--",
        "train",
        "--data",
        minio_data,
        "--model-dir",
        model_dir,
        "--train-steps",  # 6 checkpoints: the evaluator starts (imports TensorFlow, builds
        "600",  # the model) while the cluster trains; at 300 steps it once saw only the last
        "--checkpoint-every",
        "100",
        "--batch-size",  # three replicas in sync: the global batch splits evenly
        "192",
    )
    text = _check(run_cli(*command, env=DETERMINISTIC_TF, timeout=900))
    assert "chief 0 of 3 (chief: yes): 3 replica(s) in sync" in text
    assert "[worker-1]" in text and "[evaluator-0]" in text
    metrics = _metrics(model_dir)
    assert metrics["step"] == 600 and metrics["auc"] >= 0.80, metrics
    # The sidecar evaluator evaluated checkpoints as they came, not only the last one.
    evaluated = [p for p in storage.walk_files(storage.join(model_dir, "eval")) if "metrics-" in p]
    assert len(evaluated) >= 2, evaluated
    assert "final checkpoint (step 600) evaluated" in text
    assert storage.exists(storage.join(model_dir, "export", "latest.json"))

    # The same job again (a TFJob re-submitted): every replica sees the finished model.
    again = _check(run_cli(*command, env=DETERMINISTIC_TF, timeout=900))
    assert again.count("model already trained to step 600") == 3, again[-3000:]  # all 3
    assert "[evaluator-0] evaluator done: last evaluated step 600" in again


def _latest_step(model_dir: str) -> int:
    pointer = os.path.join(model_dir, "checkpoints", "latest.json")
    try:
        with open(pointer) as f:
            return json.load(f)["step"]
    except (FileNotFoundError, json.JSONDecodeError):
        return 0


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "shardtrain.cli", *args]


def test_sigkill_of_a_worker_then_the_same_command_resumes(local_data, tmp_path):
    model_dir = str(tmp_path / "model")
    command = _cli(
        "run-local",
        "--workers",
        "1",
        "--grace",
        "10",
        "--timeout",
        "600",
        "--",
        "train",
        "--data",
        local_data,
        "--model-dir",
        model_dir,
        "--train-steps",
        "700",
        "--batch-size",
        "128",
        "--checkpoint-every",
        "100",
        "--steps-per-loop",
        "20",
    )
    log_path = tmp_path / "first.log"
    with open(log_path, "w") as log:
        job = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + 300
            while _latest_step(model_dir) < 200:
                assert job.poll() is None, log_path.read_text()[-3000:]
                assert time.monotonic() < deadline, "no checkpoint at step 200 in time"
                time.sleep(0.1)
            workers = [
                p
                for p in psutil.Process(job.pid).children(recursive=True)
                if '"type": "worker"' in p.environ().get("TF_CONFIG", "")
            ]
            assert len(workers) == 1
            workers[0].send_signal(signal.SIGKILL)
            code = job.wait(timeout=120)
        finally:
            if job.poll() is None:
                job.kill()
    first = log_path.read_text()
    killed_at = _latest_step(model_dir)
    assert code != 0, first[-3000:]
    # The launcher reports whichever replica it saw end first: the killed worker, or the chief
    # that lost its peer (200); the table of every replica's exit says who was killed.
    assert re.search(r"^replica exit codes: .*worker-0=(-9|137)\b", first, re.M), first[-3000:]
    assert 200 <= killed_at < 700

    proc = subprocess.run(command, capture_output=True, text=True, timeout=600)
    second = _check(proc)
    assert f"resuming from step {killed_at}" in second
    assert f"trained to step 700 (from {killed_at})" in second
    assert _latest_step(model_dir) == 700


def test_sigterm_writes_a_checkpoint_and_exits_retryably(local_data, tmp_path):
    model_dir = str(tmp_path / "model")
    args = ("--data", local_data, "--model-dir", model_dir, "--batch-size", "64")
    job = subprocess.Popen(
        _cli("train", *args, "--train-steps", "1000000", "--steps-per-loop", "10"),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.monotonic() + 300
        # Wait until the loop runs (its TensorBoard summaries appear), then "evict the pod".
        while not os.path.isdir(os.path.join(model_dir, "logs", "train")):
            assert job.poll() is None and time.monotonic() < deadline
            time.sleep(0.1)
        time.sleep(2)
        job.send_signal(signal.SIGTERM)
        out, _ = job.communicate(timeout=120)
    finally:
        if job.poll() is None:
            job.kill()
    assert job.returncode == 143, out[-3000:]  # 128 + SIGTERM: the operator restarts the pod
    step = _latest_step(model_dir)
    assert step > 0, out[-2000:]  # the step reached, not necessarily a loop boundary
    assert "run again to resume" in out
    # Restarted, it resumes from that checkpoint.
    resumed = _check(run_cli("train", *args, "--train-steps", str(step + 20)))
    assert f"trained to step {step + 20} (from {step})" in resumed


USER_MODEL = '''
import keras

def small_dnn(spec, hparams):
    """A user model: numeric features only, one hidden layer of hparams['width'] units."""
    inputs = {f.name: keras.Input((), name=f.name) for f in spec.numeric}
    x = keras.layers.Concatenate()([keras.layers.Reshape((1,))(inputs[f.name])
                                    for f in spec.numeric])
    x = keras.layers.Lambda(lambda t: keras.ops.where(keras.ops.isnan(t), 0.0, t))(x)
    x = keras.layers.Normalization(
        mean=[f.mean for f in spec.numeric], variance=[f.std ** 2 for f in spec.numeric])(x)
    x = keras.layers.Dense(hparams["width"], activation="relu")(x)
    return keras.Model(inputs, keras.layers.Dense(1)(x))
'''


#: A user model whose training steps are slow (``SLOW_STEP_SECONDS`` of sleep in each forward
#: pass) and counted (a byte appended to ``SLOW_STEP_COUNT`` per step and replica): a long loop
#: of slow steps without hogging the shared CPUs. Inference (evaluation, export) is not slowed.
SLOW_MODEL = (
    USER_MODEL
    + """
import os, time
import numpy as np
import tensorflow as tf

class SlowStep(keras.layers.Layer):
    def call(self, x, training=False):
        if not training:
            return x

        def pause():
            time.sleep(float(os.environ.get("SLOW_STEP_SECONDS", "0")))
            if os.environ.get("SLOW_STEP_COUNT"):
                with open(os.environ["SLOW_STEP_COUNT"], "ab") as f:
                    f.write(b".")
            return np.float32(0)

        return x + tf.numpy_function(pause, [], tf.float32, stateful=True)

    def compute_output_shape(self, shape):
        return shape

def slow_dnn(spec, hparams):
    model = small_dnn(spec, {"width": 16})
    return keras.Model(model.inputs, SlowStep()(model.outputs[0]))
"""
)

#: One loop of slow steps covers the whole run: without step-granular stopping a SIGTERM would
#: wait for the end of the loop (SLOW_STEPS x SLOW_STEP_SECONDS = 30 s away).
SLOW_STEPS = 200
SLOW_STEP_SECONDS = "0.15"


def _slow_train(data: str, model_dir: str) -> tuple[str, ...]:
    steps = str(SLOW_STEPS)
    return (
        "train",
        "--model",
        "my_models:slow_dnn",
        "--data",
        data,
        "--model-dir",
        model_dir,
        "--batch-size",
        "64",
        "--train-steps",
        steps,
        "--steps-per-loop",
        steps,
        "--checkpoint-every",
        steps,
    )


def _slow_env(tmp_path, seconds: str) -> dict[str, str]:
    (tmp_path / "my_models.py").write_text(SLOW_MODEL)
    path = os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")]))
    return {
        **os.environ,
        "PYTHONPATH": path,
        "SLOW_STEP_SECONDS": seconds,
        "SLOW_STEP_COUNT": str(tmp_path / "steps"),
    }


def _signal_mid_loop(command, env, counter, log_path, target, *, after_steps: int):
    """Run ``command``; once ``after_steps`` slow steps ran, SIGTERM ``target(job)``; returns
    the exit code and the seconds from the signal to the job's end."""
    with open(log_path, "w") as log:
        job = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env)
        try:
            deadline = time.monotonic() + 300
            while not os.path.exists(counter) or os.path.getsize(counter) < after_steps:
                assert job.poll() is None, log_path.read_text()[-3000:]
                assert time.monotonic() < deadline, "the loop did not start in time"
                time.sleep(0.05)
            target(job).send_signal(signal.SIGTERM)
            signalled = time.monotonic()
            code = job.wait(timeout=120)
            return code, time.monotonic() - signalled
        finally:
            if job.poll() is None:
                job.kill()


def test_sigterm_mid_loop_stops_after_the_current_step_and_resumes(local_data, tmp_path):
    """The signal reaches a running loop of 200 slow steps: exit 143 within seconds (not at
    the end of the loop, 30 s away), with a checkpoint at the step reached."""
    model_dir = str(tmp_path / "model")
    counter = str(tmp_path / "steps")
    command = _cli(*_slow_train(local_data, model_dir))
    log_path = tmp_path / "first.log"
    code, took = _signal_mid_loop(
        command,
        _slow_env(tmp_path, SLOW_STEP_SECONDS),
        counter,
        log_path,
        lambda job: job,
        after_steps=10,
    )
    first = log_path.read_text()
    assert code == 143, first[-3000:]
    step = _latest_step(model_dir)
    ran = os.path.getsize(counter)  # steps started: the one running at the signal, maybe one more
    assert 10 <= step <= ran < SLOW_STEPS, (step, ran, first[-3000:])
    assert f"stopped at step {step} on a signal" in first
    print(f"SIGTERM to exit 143: {took:.2f} s, stopped at step {step} of a {SLOW_STEPS}-step loop")
    assert took < 15, (took, first[-3000:])  # a 30 s default grace period; measured ~3 s

    second = _check(
        subprocess.run(
            command, env=_slow_env(tmp_path, "0"), capture_output=True, text=True, timeout=600
        )
    )
    assert f"trained to step {SLOW_STEPS} (from {step})" in second
    assert _latest_step(model_dir) == SLOW_STEPS


def test_a_module_function_model_trains(local_data, tmp_path):
    """AUC bar 0.7 (chance 0.5; numeric features only, this model tops out near 0.77).

    At the default learning rate (1e-3) 200 steps left it far from done: 5 runs (data/trainer
    seeds 21/0, 201-204/1-4) gave min 0.665, median 0.683, max 0.714, mostly below the bar.
    At 0.01: measured 9 runs (21/0, 21/3, 201-206/1-6 with 203/3, one under taskset -c 0
    without TF_DETERMINISTIC_OPS): min 0.751, median 0.769, max 0.777; bar 0.7.
    """
    (tmp_path / "my_models.py").write_text(USER_MODEL)
    cfg = tmp_path / "train.yaml"
    cfg.write_text("model:\n  extra: {width: 16}\n")
    model_dir = str(tmp_path / "model")
    proc = run_cli(
        "train",
        "--config",
        str(cfg),
        "--model",
        "my_models:small_dnn",
        "--data",
        local_data,
        "--model-dir",
        model_dir,
        "--train-steps",
        "200",
        "--batch-size",
        "128",
        "--learning-rate",
        "0.01",
        # tmp_path before (not instead of) an existing PYTHONPATH, which may hold shardtrain.
        env={
            "PYTHONPATH": os.pathsep.join(
                filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")])
            ),
            **DETERMINISTIC_TF,
        },
    )
    _check(proc)
    metrics = _metrics(model_dir)
    assert metrics["step"] == 200 and metrics["auc"] > 0.7, metrics
    saved = storage.read_text(os.path.join(model_dir, "train_config.yaml"))
    assert "my_models:small_dnn" in saved and "width: 16" in saved


def test_mirrored_strategy_over_two_logical_cpus(local_data, tmp_path):
    """Two logical CPU devices in one process stand in for a node with two GPUs.

    AUC bar 0.75: measured 8 runs (data/trainer seeds 21/0 three times, one under taskset -c 0
    without TF_DETERMINISTIC_OPS, 201-205/1-5): min 0.834, median 0.847, max 0.867.
    """
    model_dir = str(tmp_path / "model")
    text = _check(
        run_cli(
            "train",
            "--data",
            local_data,
            "--model-dir",
            model_dir,
            "--devices",
            "2",
            "--train-steps",
            "200",
            "--batch-size",
            "128",
            env=DETERMINISTIC_TF,
        )
    )
    assert "2 replica(s) in sync" in text
    assert "/device:CPU:0', '/job:localhost/replica:0/task:0/device:CPU:1'" in text
    assert _metrics(model_dir)["auc"] >= 0.75


@pytest.mark.minio
def test_a_rendered_tfjob_manifest_runs_locally_on_minio(minio, minio_data, tmp_path):
    """One manifest for kubectl and local runs: `tfjob render` → `run-local job.yaml`.

    The same job as test_chief_two_workers_and_evaluator_on_minio: AUC bar 0.80, measured min
    0.839, median 0.856 over 6 runs.
    """
    model_dir = minio.uri("model-tfjob")
    rendered = _check(
        run_cli(
            "tfjob",
            "render",
            "--name",
            "quest-local",
            "--workers",
            "2",
            "--evaluator",
            "--data",
            minio_data,
            "--model-dir",
            model_dir,
            "--",
            *TRAIN,
            "--batch-size",
            "192",
        )
    )
    manifest = tmp_path / "job.yaml"
    manifest.write_text(rendered)
    assert "secretKeyRef" in rendered and minio.env["AWS_SECRET_ACCESS_KEY"] not in rendered
    # The Secret-backed variables (credentials, endpoint) come from this environment locally.
    text = _check(
        run_cli(
            "run-local",
            "--timeout",
            "600",
            "--grace",
            "60",
            str(manifest),
            env=DETERMINISTIC_TF,  # reaches the replicas: run-local passes its environment on
            timeout=900,
        )
    )
    assert "chief 0 of 3 (chief: yes): 3 replica(s) in sync" in text
    assert "[evaluator-0]" in text
    metrics = _metrics(model_dir)
    assert metrics["step"] == 300 and metrics["auc"] >= 0.80, metrics
    assert storage.exists(storage.join(model_dir, "export", "latest.json"))


#: A chief, two workers and an evaluator (``run-local --workers 2 --evaluator``), kept small:
#: the three training replicas share this machine's cores with the evaluator.
CLUSTER_STEPS = 120


def _cluster_command(data: str, model_dir: str) -> list[str]:
    return _cli(
        "run-local",
        "--workers",
        "2",
        "--evaluator",
        "--grace",
        "60",
        "--timeout",
        "600",
        "--",
        "train",
        "--data",
        data,
        "--model-dir",
        model_dir,
        "--train-steps",
        str(CLUSTER_STEPS),
        "--batch-size",
        "96",  # three replicas in sync
        "--checkpoint-every",
        "20",
        "--steps-per-loop",
        "5",
    )


def _replica(job: subprocess.Popen, task_type: str, index: int) -> psutil.Process:
    """The replica process of a run-local job with this task in its TF_CONFIG."""
    want = {"type": task_type, "index": index}
    for p in psutil.Process(job.pid).children(recursive=True):
        with __import__("contextlib").suppress(psutil.Error):
            raw = p.environ().get("TF_CONFIG")
            if raw and json.loads(raw)["task"] == want:
                return p
    raise AssertionError(f"no {task_type}-{index} replica")


def _exit_codes(text: str) -> dict[str, str]:
    line = next(x for x in text.splitlines() if x.startswith("replica exit codes: "))
    return dict(kv.split("=") for kv in line.removeprefix("replica exit codes: ").split(", "))


def _signal_replica_after_checkpoint(
    command: list[str], model_dir: str, log_path, task: tuple[str, int], sig: int
) -> tuple[int, float, str]:
    """Run the job, send ``sig`` to one replica once a checkpoint is published; returns the
    job's exit code, the seconds from the signal to the job's end, and its output."""
    with open(log_path, "w") as log:
        job = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + 300
            while _latest_step(model_dir) < 20:
                assert job.poll() is None, log_path.read_text()[-3000:]
                assert time.monotonic() < deadline, "no checkpoint at step 20 in time"
                time.sleep(0.1)
            _replica(job, *task).send_signal(sig)
            signalled = time.monotonic()
            code = job.wait(timeout=180)
            took = time.monotonic() - signalled
        finally:
            if job.poll() is None:
                job.kill()
    return code, took, log_path.read_text()


def test_sigterm_mid_loop_to_a_worker_stops_chief_and_worker_at_the_same_step(local_data, tmp_path):
    """Under MultiWorkerMirroredStrategy the replicas must run the same steps: the signalled
    worker's flag rides on the step's all-reduce, so both leave the loop after that step."""
    model_dir = str(tmp_path / "model")
    counter = str(tmp_path / "steps")
    launch = ("run-local", "--workers", "1", "--grace", "60", "--timeout", "600", "--")
    command = _cli(*launch, *_slow_train(local_data, model_dir))
    log_path = tmp_path / "first.log"
    code, took = _signal_mid_loop(
        command,
        _slow_env(tmp_path, SLOW_STEP_SECONDS),
        counter,
        log_path,
        lambda job: _replica(job, "worker", 0),
        after_steps=20,  # both replicas count: about 10 steps
    )
    first = log_path.read_text()
    assert code == 143, first[-4000:]
    assert _exit_codes(first) == {"chief-0": "143", "worker-0": "143"}, first[-4000:]
    step = _latest_step(model_dir)
    assert 5 <= step < SLOW_STEPS, first[-4000:]
    for name in ("chief-0", "worker-0"):
        assert f"[{name}] error: train: stopped at step {step} on a signal" in first, name
    print(f"SIGTERM to a worker to both exiting 143: {took:.2f} s, at step {step}")
    assert took < 20, (took, first[-4000:])

    second = _check(
        subprocess.run(
            command, env=_slow_env(tmp_path, "0"), capture_output=True, text=True, timeout=600
        )
    )
    assert f"trained to step {SLOW_STEPS} (from {step})" in second
    assert _latest_step(model_dir) == SLOW_STEPS


@pytest.mark.parametrize("task", [("chief", 0), ("worker", 1)], ids=["chief", "worker"])
def test_sigterm_to_any_replica_of_a_cluster_checkpoints_everywhere_and_resumes(
    local_data, tmp_path, task
):
    """TF's preemption notifier must not swallow SIGTERM under MultiWorkerMirroredStrategy:
    one signalled replica stops all of them at the same step, with a checkpoint, exit 143."""
    model_dir = str(tmp_path / "model")
    command = _cluster_command(local_data, model_dir)
    code, _, first = _signal_replica_after_checkpoint(
        command, model_dir, tmp_path / "first.log", task, signal.SIGTERM
    )
    assert code == 143, first[-4000:]
    codes = _exit_codes(first)
    assert codes == dict.fromkeys(("chief-0", "worker-0", "worker-1", "evaluator-0"), "143"), first[
        -4000:
    ]
    step = _latest_step(model_dir)
    assert 20 <= step < CLUSTER_STEPS, first[-4000:]  # any step: not only loop boundaries
    # Every training replica stopped at that step (the checkpoint is the signal's step).
    for name in ("chief-0", "worker-0", "worker-1"):
        assert f"[{name}] error: train: stopped at step {step} on a signal" in first, name

    second = _check(subprocess.run(command, capture_output=True, text=True, timeout=600))
    assert f"resuming from step {step}" in second
    assert f"trained to step {CLUSTER_STEPS} (from {step})" in second
    assert _latest_step(model_dir) == CLUSTER_STEPS


def test_sigkill_of_a_worker_makes_the_survivors_exit_retryably_then_resumes(local_data, tmp_path):
    """A lost peer is retryable (>= 128, not 1) and nobody hangs: the survivors exit by
    themselves well before the launcher's 60 s grace would kill them."""
    model_dir = str(tmp_path / "model")
    command = _cluster_command(local_data, model_dir)
    code, took, first = _signal_replica_after_checkpoint(
        command, model_dir, tmp_path / "first.log", ("worker", 1), signal.SIGKILL
    )
    # The job ends with the code of the replica the launcher saw end first: the killed worker
    # (137) or a survivor that lost its peer (200); the table below says what each one did.
    assert code in (137, PEER_LOST_EXIT_CODE), first[-4000:]
    codes = _exit_codes(first)
    assert codes["worker-1"] == "-9", first[-4000:]
    for name in ("chief-0", "worker-0"):  # PeerLostError: retryable, by themselves
        assert codes[name] == str(PEER_LOST_EXIT_CODE), (name, first[-4000:])
        assert f"[{name}] error: train: " in first and "lost a peer of the collective" in first
    assert took < 55, (took, first[-4000:])
    print(f"survivors ended {took:.1f}s after the SIGKILL")
    step = _latest_step(model_dir)
    assert 20 <= step < CLUSTER_STEPS

    second = _check(subprocess.run(command, capture_output=True, text=True, timeout=600))
    assert f"resuming from step {step}" in second
    assert f"trained to step {CLUSTER_STEPS} (from {step})" in second
    assert _latest_step(model_dir) == CLUSTER_STEPS


@pytest.mark.parametrize("split", ["train", "eval"])  # eval: the chief's evaluation
def test_a_corrupt_shard_ends_training_with_one_line_naming_it(local_data, tmp_path, split):
    data = tmp_path / "quest"
    shutil.copytree(local_data, data)
    shard = next(p for p in sorted((data / split).iterdir()) if p.stat().st_size > 2_000)
    raw = bytearray(shard.read_bytes())
    raw[len(raw) // 2] ^= 0x01  # one bit: TF reports a corrupt record, no file name
    shard.write_bytes(bytes(raw))
    proc = run_cli(
        "train",
        "--data",
        str(data),
        "--model-dir",
        str(tmp_path / "m"),
        *TRAIN[:2],
        "--batch-size",
        "64",
    )
    last = proc.stderr.strip().splitlines()[-1]
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert last.startswith(f"error: {shard}: corrupt (CRC-32C "), last
    assert "re-shard the dataset: `shardtrain shard " in last and last.endswith("--overwrite`")


def test_train_refuses_a_model_dir_holding_a_users_own_files(all_types, tmp_path):
    uri, _ = all_types
    model_dir = tmp_path / "mine"
    (model_dir / "eval").mkdir(parents=True)
    (model_dir / "notes.txt").write_text("my notes\n")
    (model_dir / "train_config.yaml").write_text("mine: true\n")
    (model_dir / "eval" / "metrics.json").write_text('{"mine": 1}\n')
    before = {p: p.read_bytes() for p in model_dir.rglob("*") if p.is_file()}
    args = ("--model-dir", str(model_dir), "--train-steps", "2", "--eval-split", "train")
    out = run_cli("train", "--data", uri, *args)
    assert out.returncode == 1, out.stderr
    last = [ln for ln in out.stderr.splitlines() if ln.strip()][-1]
    assert last.startswith(f"error: {model_dir}: holds files that are not part of a shardtrain")
    assert "notes.txt" in last and "Traceback" not in out.stderr
    assert {p: p.read_bytes() for p in model_dir.rglob("*") if p.is_file()} == before
