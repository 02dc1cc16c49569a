"""Worker summaries: settling and finalizing read one file per worker, not one per task
(:mod:`shardtrain.data.sharding.summary`)."""

from __future__ import annotations

import json

import pytest

from helpers import copy_of_run, dataset_files, late_code_csv
from shardtrain import storage
from shardtrain.data import sharding
from shardtrain.data.sharding import summary as summary_module
from shardtrain.data.sharding import task as task_module
from shardtrain.data.sharding.plan import PLAN_NAME, Plan
from shardtrain.data.sharding.summary import read_committed, summary_uri


def _config(src, out, **kw) -> sharding.ShardConfig:
    kw.setdefault("label", "label")
    kw.setdefault("processes", 1)
    kw.setdefault("task_bytes", 40_000)
    return sharding.ShardConfig(sources=(str(src),), output=str(out), **kw)


def _csv(path, rows: int = 24_000):
    """A categorical column of a few values per task but many in all (``code``: exact
    only when the summaries keep every value of it), a high-cardinality id, numbers."""
    lines = ["id,code,color,x,label"]
    for i in range(rows):
        lines.append(
            f"u{i:06d},c{i // 50},{('red', 'green', 'blue')[i % 3]},{i * 0.37:.2f},{i % 2}"
        )
    path.write_text("\n".join(lines) + "\n")
    return path


def _run_workers(src, out, n: int, **kw) -> None:
    for w in range(n):
        sharding.shard(_config(src, out, num_workers=n, worker_index=w, **kw))


def _stored(out) -> Plan:
    return Plan.from_dict(str(out), storage.read_json(str(out / PLAN_NAME)))


def _reads(monkeypatch) -> list[str]:
    """The URIs storage.read_json is asked for from now on."""
    seen: list[str] = []
    read = storage.read_json

    def recording(uri):
        seen.append(str(uri))
        return read(uri)

    monkeypatch.setattr(storage, "read_json", recording)
    return seen


def _small_manifest_top(monkeypatch, top: int) -> None:
    for module in (summary_module, task_module):
        monkeypatch.setattr(module, "MANIFEST_TOP", top)


def test_settling_and_finalizing_read_one_summary_per_worker_and_commit_the_same(
    tmp_path, monkeypatch
):
    src = _csv(tmp_path / "data.csv")
    # 'code' has ~40 values per task, ~160 per worker, 480 in all.
    _small_manifest_top(monkeypatch, 60)
    one = tmp_path / "one"
    sharding.shard(_config(src, one))
    many = tmp_path / "many"
    _run_workers(src, many, 3)
    plan = _stored(many)
    assert len(plan.tasks) >= 9
    assert sorted(p.name for p in (many / "_tasks").glob("summary-*")) == [
        f"summary-0000{w}-of-00003.json" for w in range(3)
    ]
    seen = _reads(monkeypatch)
    settled = sharding.settle(_config(src, many, num_workers=3))
    assert not settled.redo
    sharding.finalize(str(many))
    tasks_read = [u for u in seen if "/_tasks/task-" in u]
    assert tasks_read == [], "a task manifest was read although a summary holds it"
    assert sum("/_tasks/summary-" in u for u in seen) == 6  # settle, then finalize
    a, b = dataset_files(one), dataset_files(many)
    meta_a, meta_b = a.pop("metadata.json"), b.pop("metadata.json")
    # Exact columns merge to the same, whatever the workers: every value of 'code' was
    # kept by the summaries, though they hold more than a manifest keeps.
    cols_a, cols_b = meta_a["stats"]["columns"], meta_b["stats"]["columns"]
    assert cols_b["code"]["distinct"] == 480 and not cols_b["code"]["approximate"]
    for name in ("code", "color", "x"):
        assert cols_a[name] == cols_b[name], name
    assert meta_a["stats"]["label"] == meta_b["stats"]["label"]
    # 'id' (every value distinct) is approximate either way: lower bounds.
    assert cols_a["id"]["approximate"] and cols_b["id"]["approximate"]
    assert cols_b["id"]["count"] == cols_a["id"]["count"] == 24_000
    shards = {k: v for k, v in a.items() if k.startswith(("train/", "eval/"))}
    assert shards and shards == {k: v for k, v in b.items() if k.startswith(("train/", "eval/"))}


def test_a_summary_is_not_used_once_a_task_it_covers_is_gone_or_it_is_damaged(
    tmp_path, monkeypatch
):
    src = _csv(tmp_path / "data.csv")
    out = tmp_path / "ds"
    _run_workers(src, out, 2)
    plan = _stored(out)
    full, missing = read_committed(plan)
    assert not missing and len(full.categorical) == 2
    # A manifest deleted behind the summaries' back (not as settling does it): the summary
    # of its worker is not used, the task is missing, the other worker's summary holds.
    gone = plan.tasks[3].index
    (out / "_tasks" / f"task-{gone:05d}.json").unlink()
    committed, missing = read_committed(plan)
    assert missing == [gone] and len(committed.categorical) == 1
    assert [m["task"] for m in committed.manifests] == [
        t.index for t in plan.tasks if t.index != gone
    ]
    # The worker runs again: its summary is written again and used.
    sharding.shard(_config(src, out, num_workers=2, worker_index=gone % 2))
    # A damaged summary and one of another plan: the tasks are read one by one.
    (out / "_tasks" / "summary-00000-of-00002.json").write_text("{not json")
    other = json.loads((out / "_tasks" / "summary-00001-of-00002.json").read_text())
    other["plan"] = "0" * 32
    (out / "_tasks" / "summary-00001-of-00002.json").write_text(json.dumps(other))
    seen = _reads(monkeypatch)
    committed, missing = read_committed(plan)
    assert not missing and committed.categorical == []
    assert sum("/_tasks/task-" in u for u in seen) == len(plan.tasks)
    assert [m["task"] for m in committed.manifests] == [m["task"] for m in full.manifests]
    assert all("id" in m["stats"] for m in committed.manifests)


def test_summaries_of_runs_with_other_numbers_of_workers_do_not_overlap(tmp_path):
    src = _csv(tmp_path / "data.csv")
    out = tmp_path / "ds"
    _run_workers(src, out, 2)
    sharding.shard(_config(src, out, num_workers=3, worker_index=1))  # nothing to run
    assert (out / "_tasks" / "summary-00001-of-00003.json").exists()
    plan = _stored(out)
    committed, missing = read_committed(plan)
    assert not missing
    assert [m["task"] for m in committed.manifests] == [t.index for t in plan.tasks]
    counts = {
        sum(c["color"]["count"] for c in committed.categorical)
        + sum(m["stats"]["color"]["count"] for m in committed.manifests if "color" in m["stats"])
    }
    assert counts == {24_000}  # every task counted once


@pytest.fixture(scope="module")
def zips_by_two_workers(tmp_path_factory):
    """:func:`late_code_csv` sharded by two workers whose guessed type of ``zip`` fails: the
    source and the run, which each test copies (:func:`helpers.copy_of_run`) before settling it."""
    tmp = tmp_path_factory.mktemp("zips")
    src = late_code_csv(tmp / "zips.csv")
    _run_workers(src, tmp / "ds", 2, task_bytes=1 << 20)
    return src, tmp / "ds"


def test_settling_a_wrong_type_deletes_the_summaries_before_the_manifests(
    tmp_path, monkeypatch, zips_by_two_workers
):
    src, out = copy_of_run(zips_by_two_workers, tmp_path)
    assert len(list((out / "_tasks").glob("summary-*"))) == 2
    deleted: list[str] = []
    delete = storage.delete

    def recording(uri, recursive=False):
        deleted.append(str(uri))
        return delete(uri, recursive=recursive)

    monkeypatch.setattr(storage, "delete", recording)
    settled = sharding.settle(_config(src, out, num_workers=2, task_bytes=1 << 20))
    assert settled.redo and settled.committed is None
    summaries = [i for i, u in enumerate(deleted) if "/summary-" in u]
    manifests = [i for i, u in enumerate(deleted) if u.endswith(".json") and "/task-" in u]
    assert len(summaries) == 2 and manifests and max(summaries) < min(manifests)
    assert not list((out / "_tasks").glob("summary-*"))
    monkeypatch.undo()
    _run_workers(src, out, 2, task_bytes=1 << 20)
    plan = _stored(out)
    committed, missing = read_committed(plan)  # the workers' new summaries
    assert not missing and len(committed.categorical) == 2
    assert storage.exists(summary_uri(str(out), 0, 2))
    meta = sharding.finalize(str(out))
    assert meta.schema.column("zip").type == "string" and meta.rows_accepted == 400_000


@pytest.mark.parametrize("crash_after", [0, 1])
def test_a_crash_while_settling_leaves_no_summary_of_a_deleted_manifest(
    tmp_path, monkeypatch, crash_after, zips_by_two_workers
):
    src, out = copy_of_run(zips_by_two_workers, tmp_path)
    config = _config(src, out, num_workers=2, task_bytes=1 << 20)
    calls = {"n": 0}
    delete = storage.delete

    def crashing(uri, recursive=False):
        if "/task-" in str(uri) and str(uri).endswith(".json"):
            if calls["n"] == crash_after:
                raise KeyboardInterrupt("killed while uncommitting")
            calls["n"] += 1
        return delete(uri, recursive=recursive)

    monkeypatch.setattr(storage, "delete", crashing)
    with pytest.raises(KeyboardInterrupt):
        sharding.settle(config)
    monkeypatch.undo()
    plan = _stored(out)
    _, missing = read_committed(plan)
    assert len(missing) == crash_after  # the manifests deleted; no summary stands in for them
    assert not list((out / "_tasks").glob("summary-*"))


def test_a_summary_keeps_every_exact_value_and_the_top_of_an_approximate_column():
    def manifest(task: int, approximate: bool) -> dict:
        values = [f"v{task}-{i}" for i in range(3_000)]
        return {
            "task": task,
            "top_k": 50,
            "stats": {
                "c": {
                    "kind": "categorical",
                    "count": 3_000,
                    "missing": 0,
                    "distinct": 3_000,
                    "approximate": approximate,
                    "values": values,
                    "counts": [1 + (i % 5) for i in range(3_000)],
                }
            },
        }

    light, exact, _ = summary_module.summarize([manifest(0, False), manifest(1, False)])
    assert len(exact["c"]["values"]) == 6_000 and not exact["c"]["approximate"]
    assert light == [{"task": t, "top_k": 50, "stats": {}} for t in (0, 1)]
    _, approx, _ = summary_module.summarize([manifest(0, True), manifest(1, False)])
    assert approx["c"]["approximate"] and len(approx["c"]["values"]) == 1_000
    assert approx["c"]["count"] == 6_000 and set(approx["c"]["counts"]) == {5}
