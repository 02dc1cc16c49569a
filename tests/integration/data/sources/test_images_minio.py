"""Image datasets against a live MinIO: an s3:// tree and an s3:// manifest to s3:// shards."""

from __future__ import annotations

import pytest

from helpers import read_examples
from shardtrain import storage
from shardtrain.data import datagen, sharding
from shardtrain.data.metadata import DatasetMetadata

pytestmark = pytest.mark.minio


@pytest.fixture
def s3_images(minio, tmp_path):
    """A generated tree (with one corrupt image) uploaded to MinIO; returns its s3:// root."""
    local = tmp_path / "imgs"
    datagen.generate_images(str(local), 40, size=32, seed=4, manifest=True)
    (local / "square" / "broken.png").write_bytes(b"\x89PNG\r\n\x1a\n not really")
    root = minio.uri()
    storage.upload_dir(str(local), root)
    return root, local


def test_s3_tree_to_s3_shards_with_rejects(minio, s3_images):
    root, local = s3_images
    out = minio.uri()
    meta = sharding.shard(
        sharding.ShardConfig(
            sources=(root,),
            output=out,
            images=True,
            min_shards=2,
            processes=2,
            task_bytes=20_000,
            max_bad_fraction=0.05,
        )
    ).metadata.to_dict()
    assert meta["data_kind"] == "image"
    assert meta["rows_read"] == 41 and meta["rows_accepted"] == 40
    assert meta["rejects_by_reason"] == {"corrupt_image": 1}
    rejects = list(DatasetMetadata.load(out).iter_rejects(out))
    assert rejects[0]["path"] == "square/broken.png"
    assert rejects[0]["source"] == storage.join(root, "square/broken.png")
    rows = read_examples(out)
    assert len(rows) == 40
    for row in rows:
        path = row["path"].decode()
        assert row["label"].decode() == path.split("/")[0]
        assert row["image"] == (local / path).read_bytes()  # stored as the file is


def test_s3_manifest_with_a_missing_image_and_the_same_split_as_the_tree(minio, s3_images):
    root, _ = s3_images
    manifest = storage.join(root, "manifest.csv")
    text = storage.read_text(manifest) + "circle/missing.jpg,circle\n"
    storage.write_text(manifest, text)
    common = dict(min_shards=2, processes=1, max_bad_fraction=0.05)
    out = minio.uri()
    meta = sharding.shard(
        sharding.ShardConfig(
            sources=(manifest,), output=out, label="label", image_column="image", **common
        )
    ).metadata.to_dict()
    assert meta["rows_read"] == 41 and meta["rejects_by_reason"] == {"missing_image": 1}
    reject = next(DatasetMetadata.load(out).iter_rejects(out))
    assert reject["line"] == 42 and reject["manifest"] == manifest
    tree = sharding.shard(
        sharding.ShardConfig(sources=(root,), output=minio.uri(), images=True, **common)
    )
    split_of = {r["path"]: r["__split__"] for r in read_examples(out)}
    assert split_of == {r["path"]: r["__split__"] for r in read_examples(tree.output)}
    again = sharding.shard(
        sharding.ShardConfig(
            sources=(manifest,), output=out, label="label", image_column="image", **common
        )
    )
    assert again.status == "already-complete"
