"""Image datasets → TFRecord shards on local disk: trees, manifests, rejects, splits, resume."""

from __future__ import annotations

import collections
import io
import json
import os

import numpy as np
import pytest

from helpers import read_examples, run_cli_here
from shardtrain import storage
from shardtrain.data import datagen, sharding
from shardtrain.data.sources import images
from shardtrain.errors import ConfigError, DataError
from shardtrain.kernels import xxh64


def _config(sources, output, **kw) -> sharding.ShardConfig:
    kw.setdefault("processes", 1)
    kw.setdefault("min_shards", 2)
    return sharding.ShardConfig(sources=tuple(map(str, sources)), output=str(output), **kw)


def _tree(root, count=40, size=32, seed=3):
    """A generated tree plus two corrupt images and files that are not images."""
    datagen.generate_images(str(root), count, size=size, seed=seed, manifest=True)
    good = sorted((root / "circle").glob("*.jpg"))[0].read_bytes()
    (root / "circle" / "truncated.jpg").write_bytes(good[: len(good) // 2])
    (root / "square" / "noise.png").write_bytes(np.random.default_rng(0).bytes(3000))
    (root / "square" / "notes.txt").write_text("not an image")
    (root / "square" / ".hidden.jpg").write_bytes(b"ignored: hidden")
    return root


def _parse(output) -> list[dict]:
    """Every Example of a dataset, with its split and the decoded image's shape (Pillow)."""
    from PIL import Image

    rows = []
    for row in read_examples(str(output)):
        with Image.open(io.BytesIO(row.pop("image"))) as img:
            bands = len(img.getbands())
            shape = (img.height, img.width, bands)
        rows.append({"split": row.pop("__split__"), "shape": shape, **row})
    return rows


def _rejects(output) -> list[dict]:
    with open(os.path.join(output, "rejects", "rejects.jsonl")) as f:
        return [json.loads(line) for line in f]


def test_tree_shards_parse_back_and_corrupt_files_are_rejected(tmp_path):
    root = _tree(tmp_path / "imgs")
    out = tmp_path / "ds"
    outcome = sharding.shard(_config([root], out, images=True, max_bad_fraction=0.1))
    meta = outcome.metadata.to_dict()
    assert outcome.status == "complete"
    assert meta["data_kind"] == "image" and meta["key"] == "path" and meta["label"] == "label"
    assert meta["schema"]["columns"] == [
        {"name": "image", "type": "image", "drop": False},
        {"name": "image/height", "type": "int", "drop": False},
        {"name": "image/width", "type": "int", "drop": False},
        {"name": "image/format", "type": "string", "drop": False},
        {"name": "path", "type": "string", "drop": False},
        {"name": "label", "type": "string", "drop": False},
    ]
    assert meta["rows_read"] == 42 and meta["rows_accepted"] == 40 and meta["rows_rejected"] == 2
    assert meta["rejects_by_reason"] == {"corrupt_image": 2}
    assert meta["label_info"] == {
        "type": "string",
        "task": "multiclass",
        "classes": ["circle", "square", "triangle"],
    }
    stats = meta["stats"]["columns"]["image"]
    formats = collections.Counter(p.suffix for p in root.glob("*/img-*"))
    assert stats["kind"] == "image" and stats["count"] == 40
    assert stats["height"] == {"min": 32, "max": 32, "mean": 32.0} == stats["width"]
    assert stats["formats"] == {"jpeg": formats[".jpg"], "png": formats[".png"]}
    assert stats["bytes"] == sum(p.stat().st_size for p in root.glob("*/img-*"))

    rows = _parse(out)
    assert len(rows) == 40
    for row in rows:
        path = row["path"].decode()
        assert row["label"].decode() == path.split("/")[0]
        assert row["shape"] == (32, 32, 3) and row["image/height"] == row["image/width"] == 32
        assert row["image/format"] == (b"jpeg" if path.endswith(".jpg") else b"png")
    # The bytes are the files as they are.
    ex = next(r for r in rows if r["path"].endswith(b".png"))
    assert ex["image/format"] == b"png"

    rejects = sorted(_rejects(out), key=lambda r: r["path"])
    assert [(r["path"], r["reason"]) for r in rejects] == [
        ("circle/truncated.jpg", "corrupt_image"),
        ("square/noise.png", "corrupt_image"),
    ]
    assert rejects[0]["source"] == str(root / "circle" / "truncated.jpg")
    assert rejects[0]["line"] is None and "truncated" in rejects[0]["detail"].lower()


def test_manifest_with_relative_absolute_and_missing_paths(tmp_path):
    root = _tree(tmp_path / "imgs", count=30)
    listed = sorted(p for p in root.glob("*/img-*"))
    classes = {"circle": 0, "square": 1, "triangle": 2}
    lines = ["file,cls,note"]
    for i, p in enumerate(listed):
        rel = p.relative_to(root).as_posix()
        value = str(p) if i == 0 else rel  # an absolute path too
        lines.append(f"{value},{classes[p.parent.name]},x")
    lines.insert(5, "circle/gone.jpg,0,x")  # line 6: the file does not exist
    lines.insert(9, "square/img-9.jpg,1")  # line 10: a field too few
    lines.insert(12, "circle/truncated.jpg,0,x")  # line 13: corrupt data
    lines.insert(14, "")  # a blank line
    manifest = root / "manifest2.csv"
    manifest.write_text("\n".join(lines) + "\n")
    out = tmp_path / "ds"
    meta = sharding.shard(
        _config([manifest], out, label="cls", image_column="file", max_bad_fraction=0.2)
    ).metadata.to_dict()
    assert meta["rows_read"] == 33 and meta["rows_accepted"] == 30
    assert meta["rejects_by_reason"] == {
        "corrupt_image": 1,
        "missing_image": 1,
        "wrong_field_count": 1,
    }
    assert meta["label_info"]["type"] == "int" and meta["label_info"]["classes"] == ["0", "1", "2"]
    assert [c["name"] for c in meta["schema"]["columns"]][-1] == "cls"
    rejects = {r["line"]: r for r in _rejects(out)}
    assert sorted(rejects) == [6, 10, 13]
    assert rejects[6]["reason"] == "missing_image" and rejects[6]["path"] == "circle/gone.jpg"
    assert rejects[6]["source"] == str(root / "circle" / "gone.jpg")
    assert rejects[6]["manifest"] == str(manifest)
    assert rejects[10]["reason"] == "wrong_field_count"
    assert rejects[13]["reason"] == "corrupt_image"

    rows = _parse(out)
    assert len(rows) == 30
    by_path = {r["path"].decode(): r for r in rows}
    assert str(listed[0]) in by_path  # the manifest's value, as given
    for path, row in by_path.items():
        assert row["cls"] == classes[path.split("/")[-2]]
        assert row["shape"] == (32, 32, 3)


def test_resize_reencodes_in_the_same_format(tmp_path):
    root = tmp_path / "imgs"
    datagen.generate_images(str(root), 12, size=40, seed=5, manifest=True)
    out = tmp_path / "ds"
    meta = sharding.shard(
        _config([root / "manifest.csv"], out, label="label", image_column="image", resize=(24, 16))
    ).metadata.to_dict()
    assert meta["stats"]["columns"]["image"]["height"]["max"] == 16
    rows = _parse(out)
    assert {r["shape"] for r in rows} == {(16, 24, 3)}
    assert {(r["image/height"], r["image/width"]) for r in rows} == {(16, 24)}
    for r in rows:
        assert r["image/format"] == (b"jpeg" if r["path"].endswith(b".jpg") else b"png")


def test_max_bad_fraction_fails_the_run(tmp_path):
    root = _tree(tmp_path / "imgs", count=20)
    with pytest.raises(DataError, match=r"2 of 22 rows .* rejected .*corrupt_image=2"):
        sharding.shard(_config([root], tmp_path / "ds", images=True, max_bad_fraction=0.05))
    assert not (tmp_path / "ds" / "metadata.json").exists()
    # The rejects are there to look at.
    assert len(_rejects(tmp_path / "ds")) == 2


def test_split_is_deterministic_by_path(tmp_path):
    root = tmp_path / "imgs"
    datagen.generate_images(str(root), 120, size=48, seed=9, manifest=True)
    common = dict(images=True, splits=(("train", 0.7), ("eval", 0.3)), min_shards=4)
    one = sharding.shard(_config([root], tmp_path / "a", **common)).metadata.to_dict()
    for w in range(2):
        sharding.shard(
            _config(
                [root], tmp_path / "b", num_workers=2, worker_index=w, task_bytes=100_000, **common
            )
        )
    two = sharding.finalize(str(tmp_path / "b")).to_dict()
    # ~440 KB in tasks of 100 KB: 5 tasks, and so 5 shards of each split (one per task).
    stored = storage.read_json(str(tmp_path / "b" / "_plan.json"))
    assert len(stored["tasks"]) == 5 and stored["num_shards"] == [5, 5]

    def splits(out):
        return {r["path"]: r["split"] for r in _parse(out)}

    a, b = splits(tmp_path / "a"), splits(tmp_path / "b")
    assert a == b and len(a) == 120
    assert one["splits"]["eval"]["num_records"] == two["splits"]["eval"]["num_records"]
    # The split is the hash of the path: the same rule as a CSV key column.
    fractions = np.array([0.7, 1.0])
    for path, split in a.items():
        h = np.uint64(xxh64.xxh64(path))
        unit = float(h >> np.uint64(11)) / (1 << 53)
        assert split == ("train", "eval")[int(np.searchsorted(fractions, unit, side="right"))]
    # The manifest of the same images gives the same split for the same path.
    meta = sharding.shard(
        _config(
            [root / "manifest.csv"],
            tmp_path / "c",
            label="label",
            image_column="image",
            splits=common["splits"],
        )
    ).metadata.to_dict()
    assert meta["rows_accepted"] == 120
    assert splits(tmp_path / "c") == a


def test_rerun_after_success_does_nothing_and_resume_after_a_lost_task(tmp_path):
    root = tmp_path / "imgs"
    datagen.generate_images(str(root), 60, size=48, seed=11, manifest=False)
    out = tmp_path / "ds"
    cfg = _config([root], out, images=True, task_bytes=100_000, min_shards=4)
    first = sharding.shard(cfg)
    assert first.tasks_run > 1
    stamp = os.stat(out / "metadata.json").st_mtime_ns
    again = sharding.shard(cfg)
    assert again.status == "already-complete" and again.tasks_run == 0
    assert os.stat(out / "metadata.json").st_mtime_ns == stamp
    # A crash after task 0 committed: the re-run redoes only the others, every image once.
    os.unlink(out / "metadata.json")
    for name in os.listdir(out / "_tasks"):
        if not name.startswith("task-00000"):
            os.unlink(out / "_tasks" / name)
    resumed = sharding.shard(cfg)
    assert resumed.status == "complete" and resumed.tasks_skipped == 1
    paths = [r["path"] for r in _parse(out)]
    assert len(paths) == len(set(paths)) == 60


def test_changed_tree_after_planning_is_an_error(tmp_path):
    root = tmp_path / "imgs"
    datagen.generate_images(str(root), 8, size=16, seed=1, manifest=False)
    cfg = _config([root], tmp_path / "ds", images=True)
    plan = sharding.build_plan(cfg)
    png = next(iter(_pngs(root)))
    (root / png.parent / "late.png").write_bytes((root / png).read_bytes())
    images._listings.clear()  # a fresh process lists the tree again
    with pytest.raises(DataError, match="changed since this run was planned"):
        sharding.run_task(plan, plan.tasks[0], cfg)


def _pngs(root):
    return [p.relative_to(root) for p in root.glob("*/*.png")]


def test_clear_errors(tmp_path):
    with pytest.raises(DataError, match="not a directory"):
        sharding.shard(_config([tmp_path / "nope"], tmp_path / "ds", images=True))
    (tmp_path / "empty" / "a").mkdir(parents=True)
    with pytest.raises(DataError, match=r"empty: no \.jpg, \.jpeg or \.png file"):
        sharding.shard(_config([tmp_path / "empty"], tmp_path / "ds", images=True))
    manifest = tmp_path / "m.csv"
    manifest.write_text("file,label\na.jpg,1\n")
    with pytest.raises(DataError, match=r"m\.csv: image column 'image' not found"):
        sharding.shard(_config([manifest], tmp_path / "ds", label="label", image_column="image"))
    with pytest.raises(ConfigError, match="--label 'path'"):
        sharding.shard(_config([manifest], tmp_path / "ds", label="path", image_column="file"))
    with pytest.raises(ConfigError, match="--key does not apply"):
        _config([tmp_path], tmp_path / "ds", images=True, key="x")
    with pytest.raises(ConfigError, match="--resize"):
        images.parse_resize("224")


def test_decode_checks_every_pixel():
    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (20, 10), (200, 10, 10)).save(buf, format="PNG")
    png = buf.getvalue()
    ok = images.decode(png)
    assert isinstance(ok, images._Image) and (ok.height, ok.width, ok.format) == (10, 20, "png")
    assert images.decode(png[:-20])[0] == "corrupt_image"  # no end marker
    assert images.decode(png[:60])[0] == "corrupt_image"
    buf = io.BytesIO()
    Image.new("RGB", (8, 8)).save(buf, format="GIF")
    assert images.decode(buf.getvalue())[0] == "unsupported_format"
    resized = images.decode(png, (5, 7))
    assert (resized.width, resized.height) == (5, 7)
    assert Image.open(io.BytesIO(resized.data)).size == (5, 7)


def test_gen_data_is_deterministic_mixed_and_balanced(tmp_path):
    a = datagen.generate_images(str(tmp_path / "a"), 60, size=24, seed=2, classes=4)
    b = datagen.generate_images(str(tmp_path / "b"), 60, size=24, seed=2, classes=4)
    assert a.classes == b.classes and len(a.classes) == 4
    assert min(a.formats.values()) > 10
    for p in (tmp_path / "a").rglob("*.*"):
        assert p.read_bytes() == (tmp_path / "b" / p.relative_to(tmp_path / "a")).read_bytes()
    manifest = (tmp_path / "a" / "manifest.csv").read_text().splitlines()
    assert manifest[0] == "image,label" and len(manifest) == 61
    path, label = manifest[1].split(",")
    assert path.startswith(label + "/") and (tmp_path / "a" / path).exists()


def test_cli_gen_data_and_shard_a_tree_then_a_manifest(tmp_path):
    root = tmp_path / "imgs"
    run_cli_here(
        "gen-data", "images", "--count", "30", "--size", "20", "--output", str(root), check=True
    )
    tree = run_cli_here(
        "shard",
        str(root),
        "--images",
        "--output",
        str(tmp_path / "t"),
        "--min-shards",
        "2",
        "--processes",
        "1",
        check=True,
    )
    assert "sharded 30 rows" in tree.stdout
    manifest = run_cli_here(
        "shard",
        str(root / "manifest.csv"),
        "--image-column",
        "image",
        "--label",
        "label",
        "--resize",
        "8x8",
        "--output",
        str(tmp_path / "m"),
        "--processes",
        "1",
        check=True,
    )
    assert "sharded 30 rows" in manifest.stdout
    meta = storage.read_json(str(tmp_path / "m" / "metadata.json"))
    assert meta["data_kind"] == "image" and meta["stats"]["columns"]["image"]["width"]["max"] == 8
    bad = run_cli_here("shard", str(root), "--output", str(tmp_path / "x"), "--label", "label")
    assert bad.returncode == 1 and "is a directory" in bad.stderr
