"""The documents shardtrain reads back, checked whole (:mod:`shardtrain.documents`): the
checker's messages, the shapes against what the writers write, and every reader turning a
mistyped document into one line naming the file and the field."""

from __future__ import annotations

import json
import re
from types import SimpleNamespace

import pytest

from shardtrain import documents
from shardtrain.data import datagen, sharding
from shardtrain.documents import (
    ANY,
    BOOL,
    INT,
    NUM,
    STR,
    DocumentError,
    ListOf,
    MapOf,
    Nullable,
    Obj,
    Pair,
    check,
)
from shardtrain.errors import DataError, ShardtrainError

SHAPE = Obj(
    {
        "name": STR,
        "count": INT,
        "ratio": NUM,
        "on": BOOL,
        "parts": ListOf(Obj({"path": STR, "bytes": INT})),
        "splits": MapOf(Obj({"fraction": NUM})),
        "pairs": ListOf(Pair((STR, NUM))),
        "anything": ANY,
    },
    {"key": Nullable(STR), "note": STR},
)


def _good() -> dict:
    return {
        "name": "q",
        "count": 3,
        "ratio": 1,  # an integer is a number
        "on": False,
        "parts": [{"path": "a", "bytes": 1, "extra": "later versions may add fields"}],
        "splits": {"train": {"fraction": 0.9}},
        "pairs": [["train", 0.9]],
        "anything": None,
        "key": None,
        "note": None,  # an optional field set to null is "not set"
    }


def test_a_document_of_its_shape_is_returned_unchanged():
    doc = _good()
    assert check(doc, SHAPE, "s3://b/x.json") is doc
    del doc["key"], doc["note"]
    assert check(doc, SHAPE, "s3://b/x.json") is doc


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d.pop("count"), "field 'count' is missing"),
        (lambda d: d.update(count="3"), "field 'count' must be an integer, not a string"),
        (lambda d: d.update(count=True), "field 'count' must be an integer, not true"),
        (lambda d: d.update(count=2.5), "field 'count' must be an integer, not a number"),
        (lambda d: d.update(ratio=False), "field 'ratio' must be a number, not false"),
        (lambda d: d.update(on=0), "field 'on' must be true or false, not an integer"),
        (lambda d: d.update(name=None), "field 'name' must be a string, not null"),
        (lambda d: d.update(parts={}), "field 'parts' must be a list, not an object"),
        (lambda d: d["parts"].append("x"), r"field 'parts\[1\]' must be an object, not a string"),
        (lambda d: d["parts"][0].pop("bytes"), r"field 'parts\[0\]\.bytes' is missing"),
        (lambda d: d.update(splits="x"), "field 'splits' must be an object, not a string"),
        (
            lambda d: d["splits"]["train"].update(fraction=[]),
            r"field 'splits\.train\.fraction' must be a number, not a list",
        ),
        (
            lambda d: d.update(pairs=[["train"]]),
            r"field 'pairs\[0\]' must be a list of 2 values \(a string, a number\), not a "
            "list of 1",
        ),
        (
            lambda d: d.update(pairs=[[1, 0.5]]),
            r"field 'pairs\[0\]\[0\]' must be a string, not an integer",
        ),
        (lambda d: d.update(key=3), "field 'key' must be a string, not an integer"),
        (lambda d: d.update(note={}), "field 'note' must be a string, not an object"),
    ],
)
def test_the_first_wrong_field_is_one_line_naming_the_file_and_the_field(change, message):
    doc = _good()
    change(doc)
    with pytest.raises(DocumentError, match=message) as err:
        check(doc, SHAPE, "s3://b/x.json")
    assert str(err.value).startswith("s3://b/x.json: field '")
    assert "\n" not in str(err.value)
    assert isinstance(err.value, DataError) and err.value.exit_code == 1
    assert err.value.where == "s3://b/x.json" and err.value.field


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ([], "not an object (a list)"),
        ("x", "not an object (a string)"),
        (None, "not an object (null)"),
    ],
)
def test_a_document_that_is_not_an_object_says_so(doc, message):
    with pytest.raises(DocumentError, match=rf"^/d/x\.json: {re.escape(message)}$") as err:
        check(doc, SHAPE, "/d/x.json")
    assert err.value.field == ""


def test_a_hint_says_what_gets_out():
    with pytest.raises(DocumentError) as err:
        check({}, SHAPE, "/d/x.json", hint="shard it again with `shardtrain shard ...`")
    assert str(err.value) == (
        "/d/x.json: field 'name' is missing; shard it again with `shardtrain shard ...`"
    )


# ------------------------------------------------------------------------------------------
# The shapes fit what the writers write
# ------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    """A small dataset sharded by two workers (so task manifests and summaries exist)."""
    root = tmp_path_factory.mktemp("documents")
    src = root / "q.csv"
    datagen.generate_quest_logs(str(src), 3_000, seed=4, bad_fraction=0.01)
    out = root / "ds"
    for worker in range(2):
        config = sharding.ShardConfig(
            sources=(str(src),),
            output=str(out),
            label="cleared",
            key="attempt_id",
            processes=1,
            task_bytes=60_000,
            max_bad_fraction=0.05,
            num_workers=2,
            worker_index=worker,
        )
        sharding.shard(config)
    sharding.finalize(str(out))
    return out


def test_the_sharder_writes_documents_of_their_shapes(dataset):
    read = lambda name: json.loads((dataset / name).read_text())  # noqa: E731
    check(read("metadata.json"), documents.METADATA, "metadata.json")
    check(read("_plan.json"), documents.PLAN, "_plan.json")
    tasks = sorted((dataset / "_tasks").glob("task-*[0-9].json"))
    summaries = sorted((dataset / "_tasks").glob("summary-*.json"))
    assert len(tasks) > 2 and len(summaries) == 2
    for path in tasks:
        check(json.loads(path.read_text()), documents.TASK_MANIFEST, str(path))
    for path in summaries:
        check(json.loads(path.read_text()), documents.WORKER_SUMMARY, str(path))


def test_the_checkpoint_store_writes_a_pointer_of_its_shape(tmp_path):
    from shardtrain.train.checkpoints import POINTER, CheckpointStore

    store = CheckpointStore(str(tmp_path / "model"), str(tmp_path / "local"))
    for step in (1, 2):
        for suffix in (".index", ".data-00000-of-00001"):
            (tmp_path / "local" / f"ckpt-{step}{suffix}").write_text("x")
        store.publish(step)
    pointer = json.loads((tmp_path / "model" / "checkpoints" / POINTER).read_text())
    check(pointer, documents.CHECKPOINT_POINTER, POINTER)
    assert store.latest().step == 2


# ------------------------------------------------------------------------------------------
# Every reader: a mistyped document is one line naming the file and the field
# ------------------------------------------------------------------------------------------


def _write(path, doc) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc))
    return str(path)


def test_a_mistyped_checkpoint_pointer_is_one_line(tmp_path):
    from shardtrain.train.checkpoints import POINTER, CheckpointStore

    store = CheckpointStore(str(tmp_path / "model"), str(tmp_path / "local"))
    target = tmp_path / "model" / "checkpoints" / POINTER
    _write(target, {"step": 5, "prefix": "ckpt-5", "files": "ckpt-5.index"})
    with pytest.raises(DocumentError, match=rf"^{target}: field 'files' must be a list"):
        store.latest()
    _write(target, {"step": 5, "prefix": "ckpt-5", "files": [], "history": {}})
    with pytest.raises(DocumentError, match="field 'history' must be a list, not an object"):
        store._history()


def test_a_mistyped_export_pointer_is_one_line(tmp_path):
    from shardtrain.train.export import latest_export

    target = _write(tmp_path / "export" / "latest.json", {"path": ["export/1"], "step": 3})
    with pytest.raises(DocumentError, match=rf"^{target}: field 'path' must be a string"):
        latest_export(str(tmp_path))


def test_a_mistyped_serving_pointer_is_one_line(tmp_path):
    from shardtrain.train.blessing import find_baseline

    target = _write(tmp_path / "latest.json", {"path": 12, "version": "12"})
    with pytest.raises(DocumentError, match=rf"^{target}: field 'path' must be a string"):
        find_baseline(str(tmp_path))
    _write(tmp_path / "latest.json", [])
    with pytest.raises(DocumentError, match="not an object"):
        find_baseline(str(tmp_path))
    _write(tmp_path / "latest.json", {"step": 3})
    with pytest.raises(DataError, match="names no version"):
        find_baseline(str(tmp_path))


def test_a_mistyped_model_info_is_one_line(tmp_path):
    from shardtrain.train.scoring import ExportedModel

    target = _write(tmp_path / "shardtrain_model.json", {"inputs": "x", "feature_spec": {}})
    with pytest.raises(DocumentError, match=rf"^{target}: field 'inputs' must be a list"):
        ExportedModel.read(str(tmp_path))
    _write(tmp_path / "shardtrain_model.json", {"inputs": [], "feature_spec": {"classes": 2}})
    with pytest.raises(DocumentError, match=r"field 'feature_spec\.classes' must be a list"):
        ExportedModel.read(str(tmp_path))


def test_a_mistyped_blessing_is_one_line(tmp_path):
    from shardtrain.kubeflow.publish import check_still_served

    target = _write(tmp_path / "model" / "eval" / "blessing.json", {"blessed": "yes"})
    with pytest.raises(DocumentError, match=rf"^{target}: field 'blessed' must be true or false"):
        check_still_served(str(tmp_path / "model"), str(tmp_path / "serving"), "e")
    _write(tmp_path / "model" / "eval" / "blessing.json", {"blessed": True, "candidate": "e"})
    with pytest.raises(DocumentError, match="field 'candidate' must be an object"):
        check_still_served(str(tmp_path / "model"), str(tmp_path / "serving"), "e")


def test_mistyped_metrics_are_one_line(tmp_path):
    from shardtrain.train.evaluator import _evaluated_step

    target = _write(tmp_path / "eval" / "metrics.json", {"step": "12"})
    with pytest.raises(DocumentError, match=rf"^{target}: field 'step' must be an integer"):
        _evaluated_step(str(tmp_path))


def test_a_mistyped_artifact_pointer_is_one_line(tmp_path):
    from shardtrain.kubeflow.pointers import read_pointer

    path = _write(tmp_path / "dataset", {"uri": ["s3://b/q"]})
    with pytest.raises(DocumentError, match=rf"^artifact {path}: field 'uri' must be a string"):
        read_pointer(SimpleNamespace(path=path, metadata={}))


@pytest.mark.parametrize(
    ("report", "message"),
    [
        ('{"worker": "0", "status": "complete"}', "shard worker report 1: field 'worker'"),
        ('{"status": "complete"}', "shard worker report 1: field 'worker' is missing"),
        ("[1]", "shard worker report 1: not an object"),
        ("{not json", "shard worker report 1: not valid JSON"),
    ],
)
def test_a_mistyped_worker_report_is_one_line(report, message):
    from shardtrain.kubeflow.shard_steps import _worker_reports

    good = json.dumps({"worker": 0, "status": "complete", "tasks_run": 2})
    with pytest.raises(DataError, match=message):
        _worker_reports([good, report])
    assert _worker_reports([good]) == [json.loads(good)]


def test_a_mistyped_plan_is_one_line_with_the_command_that_gets_out(dataset, tmp_path):
    import shutil

    from shardtrain.data.sharding.settle import stored_plan

    out = tmp_path / "ds"
    shutil.copytree(dataset, out)
    plan = json.loads((out / "_plan.json").read_text())
    plan["tasks"][0]["shard_ranges"] = [[0]]
    (out / "_plan.json").write_text(json.dumps(plan))
    with pytest.raises(DocumentError) as err:
        stored_plan(str(out))
    message = str(err.value)
    assert message.startswith(f"{out}/_plan.json: field 'tasks[0].shard_ranges[0]' must be ")
    assert "; the dataset is damaged: shard it again with `shardtrain shard " in message
    assert f"--output {out} --label cleared --key attempt_id " in message
    assert message.endswith("--overwrite`")


def test_a_mistyped_task_manifest_is_not_taken_as_committed(dataset, tmp_path, caplog):
    """A task whose manifest does not read is not committed: the run takes it for one to run
    (again), saying so in one line, instead of failing in a traceback when it merges."""
    import shutil

    from shardtrain.data.sharding.settle import stored_plan
    from shardtrain.data.sharding.summary import delete_summaries, read_committed

    out = tmp_path / "ds"
    shutil.copytree(dataset, out)
    delete_summaries(str(out))
    manifest = out / "_tasks" / "task-00001.json"
    doc = json.loads(manifest.read_text())
    doc["shards"][0]["num_records"] = "many"
    manifest.write_text(json.dumps(doc))
    _, missing = read_committed(stored_plan(str(out)))
    assert missing == [1]
    assert f"{manifest}: field 'shards[0].num_records' must be an integer" in caplog.text


def test_every_document_error_is_a_shardtrain_error():
    """The CLI prints a ShardtrainError's line and exits with its code: no traceback."""
    assert issubclass(DocumentError, ShardtrainError)
