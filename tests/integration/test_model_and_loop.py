"""The trainer's TensorFlow parts on tiny data: Example and CSV parsing agree, the built-in and
user models, and the real step function under the controller (train, checkpoint, restore).
"""

from __future__ import annotations

import csv
import math
import sys

import numpy as np
import pytest

from helpers import ALL_TYPES
from shardtrain.errors import ConfigError
from shardtrain.train.controller import Controller, StopFlag
from shardtrain.train.features import FeatureSpec
from shardtrain.train.models import build_model, resolve_model_fn
from training_fakes import Recorder


def test_examples_and_csv_lines_parse_to_the_same_features(all_types):
    """The training parser (Examples) and the serving parser (raw CSV) must agree exactly."""
    import tensorflow as tf

    uri, meta = all_types
    spec = FeatureSpec.from_metadata(meta)
    shard = meta.shard_uris(uri, "train") + meta.shard_uris(uri, "eval")
    serialized = tf.stack(list(tf.data.TFRecordDataset(shard)))
    from_examples, labels, keys = spec.parse_examples(serialized, with_key=True)

    with open(ALL_TYPES, newline="") as f:
        rows = {r[0]: r for r in csv.reader(f) if r[0] != "id"}
    lines = []
    for k in keys.numpy():
        row = rows[k.decode()]
        lines.append(",".join(f'"{v}"' if "," in v else v for v in row))
    from_csv = spec.parse_csv(tf.constant(lines))
    assert len(lines) >= 4
    for name in spec.feature_names:
        a, b = from_examples[name].numpy(), from_csv[name].numpy()
        if a.dtype.kind == "f":
            np.testing.assert_array_equal(np.isnan(a), np.isnan(b), err_msg=name)
            np.testing.assert_array_equal(a[~np.isnan(a)], b[~np.isnan(b)], err_msg=name)
        else:
            assert list(a) == list(b), name
    by_key = dict(zip([k.decode() for k in keys.numpy()], labels.numpy(), strict=True))
    assert by_key["r1"] == 1 and by_key["r2"] == 0
    r3 = [k.decode() for k in keys.numpy()].index("r3")
    assert np.isnan(from_examples["level"].numpy()[r3])  # missing int → NaN
    assert from_examples["cls"].numpy()[r3] == b""  # missing string → ""


def test_model_functions(all_types, tmp_path, monkeypatch):
    _, meta = all_types
    spec = FeatureSpec.from_metadata(meta)
    model = build_model("tabular", spec, {"hidden_units": [8], "embedding_dim": 4})
    assert model.outputs[0].shape[-1] == 1
    with pytest.raises(ConfigError, match="MODULE:FUNCTION"):
        resolve_model_fn("resnet")
    with pytest.raises(ConfigError, match="cannot import module"):
        resolve_model_fn("no_such_module_xyz:fn")
    (tmp_path / "bad_models.py").write_text(
        "import keras\n"
        "def three(spec, hparams):\n"
        "    i = keras.Input((), name='level')\n"
        "    return keras.Model(i, keras.layers.Dense(3)(keras.layers.Reshape((1,))(i)))\n"
        "def not_a_model(spec, hparams):\n"
        "    return 42\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("bad_models", None)
    with pytest.raises(ConfigError, match="must output 1"):
        build_model("bad_models:three", spec, {})
    with pytest.raises(ConfigError, match=r"not a keras\.Model"):
        build_model("bad_models:not_a_model", spec, {})
    with pytest.raises(ConfigError, match="has no function 'missing'"):
        resolve_model_fn("bad_models:missing")


@pytest.fixture(scope="module")
def quest(tmp_path_factory):
    from shardtrain.data import datagen, sharding

    root = tmp_path_factory.mktemp("quest")
    csv = str(root / "quest.csv")
    datagen.generate_quest_logs(csv, 300, seed=4, numeric=3, categorical=2)
    meta = sharding.shard(
        sharding.ShardConfig(
            sources=(csv,),
            output=str(root / "ds"),
            label="cleared",
            key="attempt_id",
            compression="none",
            num_shards=1,
            processes=1,
        )
    ).metadata
    return str(root / "ds"), meta


def test_a_tiny_keras_model_trains_checkpoints_and_resumes(quest, tmp_path):
    import numpy as np
    import tensorflow as tf

    from shardtrain.train import loop
    from shardtrain.train.checkpoints import CheckpointStore
    from shardtrain.train.config import InputConfig, ModelConfig, TrainConfig
    from shardtrain.train.features import FeatureSpec

    uri, meta = quest
    spec = FeatureSpec.from_metadata(meta)
    config = TrainConfig(
        data=uri,
        model_dir=str(tmp_path / "model"),
        train_steps=7,
        batch_size=16,
        steps_per_loop=3,
        checkpoint_every=4,
        model=ModelConfig(name="tabular", hidden_units=[8], embedding_dim=2),
        input=InputConfig(shuffle_buffer=64, cycle_length=1),
    ).validate()
    strategy = tf.distribute.get_strategy()  # the default strategy: one replica

    def controller_for(state, store: CheckpointStore, rec: Recorder) -> Controller:
        iterator, _ = loop.distributed_input(strategy, config, meta, spec, str(tmp_path), seed=0)
        train_loop = loop.build_train_loop(
            strategy, state.model, state.optimizer, spec, config.batch_size, state.global_step
        )

        def save(step: int) -> None:
            state.checkpoint.write(store.local_prefix(step))
            store.publish(step, final=step >= config.train_steps)
            rec.save(step)

        return Controller(
            loop.DistributedSteps(train_loop, iterator, state),
            train_steps=config.train_steps,
            steps_per_loop=config.steps_per_loop,
            checkpoint_every=config.checkpoint_every,
            eval_every=config.eval_every,
            global_batch=config.batch_size,
            save=save,
            vote=loop.build_stop_vote(strategy),
            stop=StopFlag(),
            summaries=rec,
        )

    store = CheckpointStore(config.model_dir, str(tmp_path / "stage"))
    state = loop.build_training_state(strategy, config, spec, mixed=False)
    rec = Recorder()
    assert controller_for(state, store, rec).run(0) == 7
    assert int(state.global_step.numpy()) == 7
    assert rec.saves == [4, 7]
    assert [s for s, _ in rec.scalars_at] == [3, 4, 7]
    for _, values in rec.scalars_at:
        assert math.isfinite(values["loss"]) and 0 <= values["accuracy"] <= 1
        assert values["learning_rate"] == pytest.approx(config.learning_rate)
    latest = store.latest()
    assert (latest.step, latest.final) == (7, True)

    # A restart: a fresh state restores the final checkpoint exactly, then trains on.
    config.train_steps = 9
    again = loop.build_training_state(strategy, config, spec, mixed=False)
    reader = CheckpointStore(config.model_dir, str(tmp_path / "stage2"))
    again.checkpoint.read(reader.fetch(latest)).assert_existing_objects_matched()
    assert int(again.global_step.numpy()) == 7
    for a, b in zip(state.model.weights, again.model.weights, strict=True):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    rec2 = Recorder()
    assert controller_for(again, reader, rec2).run(7) == 9
    assert rec2.saves == [8, 9]

    # A stop request (what SIGTERM sets) ends a call after the step that reads it.
    stop_requested = loop.stop_request_variable()
    iterator, _ = loop.distributed_input(strategy, config, meta, spec, str(tmp_path), seed=1)
    stoppable = loop.build_train_loop(
        strategy,
        again.model,
        again.optimizer,
        spec,
        config.batch_size,
        again.global_step,
        stop_requested=stop_requested,
    )
    steps = loop.DistributedSteps(stoppable, iterator, again)
    assert steps(3).step == 12  # no request: every step asked for
    stop_requested.assign(1)
    out = steps(50)
    assert out.step == 13 and math.isfinite(out.loss_sum) and out.loss_sum > 0


def test_one_cpu_replica_reads_the_same_batches_without_the_distributed_iterator(quest, tmp_path):
    """A single CPU replica trains from a plain ``tf.data`` iterator (the distributed one
    costs ~25% of the input's CPU): the same batches as the distributed iterator gives."""
    import tensorflow as tf

    from shardtrain.train import dataset, loop
    from shardtrain.train.config import InputConfig, TrainConfig

    uri, meta = quest
    spec = FeatureSpec.from_metadata(meta)
    strategy = tf.distribute.MirroredStrategy(["/cpu:0"])
    assert loop.single_cpu_replica(strategy)
    assert loop.single_cpu_replica(tf.distribute.get_strategy())
    config = TrainConfig(
        data=uri,
        model_dir=str(tmp_path / "model"),
        batch_size=16,
        input=InputConfig(shuffle_buffer=64, cycle_length=1),
    ).validate()
    plain, _ = loop.distributed_input(strategy, config, meta, spec, str(tmp_path), seed=3)
    assert isinstance(plain, tf.data.Iterator)
    distributed = iter(
        strategy.distribute_datasets_from_function(
            lambda ctx: dataset.train_dataset(
                uri,
                meta,
                spec,
                split="train",
                batch_size=16,
                shuffle_buffer=64,
                cycle_length=1,
                seed=3,
            )
        )
    )
    for _ in range(30):  # past the end of the 270-row split: a second pass too
        (features, labels), (want_features, want_labels) = next(plain), next(distributed)
        np.testing.assert_array_equal(labels.numpy(), want_labels.numpy())
        for name in spec.feature_names:
            np.testing.assert_array_equal(
                features[name].numpy(), want_features[name].numpy(), err_msg=name
            )


def test_small_sparse_gradients_go_dense_with_duplicate_rows_added():
    import keras
    import numpy as np
    import tensorflow as tf

    from shardtrain.train import loop

    slices = tf.IndexedSlices(
        values=tf.constant([[1.0, 1, 1], [2, 2, 2], [3, 3, 3]]),
        indices=tf.constant([1, 4, 1], dtype=tf.int64),
        dense_shape=tf.constant([10, 3], dtype=tf.int64),
    )
    plain = tf.ones([2, 2])
    dense, same = loop.dense_small_gradients([slices, plain])
    assert not isinstance(dense, tf.IndexedSlices)
    expected = np.zeros([10, 3], np.float32)
    expected[1], expected[4] = 4.0, 2.0  # row 1 looked up twice: its two rows add up
    np.testing.assert_array_equal(dense.numpy(), expected)
    assert same is plain
    # A table over the bound stays sparse (sending it whole would cost more).
    (kept,) = loop.dense_small_gradients([slices], max_bytes=10 * 3 * 4 - 1)
    assert isinstance(kept, tf.IndexedSlices)

    # What the trainer's step meets: an Embedding's gradient, inside a tf.function.
    embed = keras.layers.Embedding(101, 8)
    embed.build((None,))

    @tf.function
    def kinds(ids):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(embed(ids))
        (grad,) = tape.gradient(loss, embed.trainable_variables)
        (after,) = loop.dense_small_gradients([grad])
        return isinstance(grad, tf.IndexedSlices), isinstance(after, tf.IndexedSlices), after

    was_sparse, still_sparse, after = kinds(tf.constant([3, 3, 7]))
    assert was_sparse and not still_sparse
    assert after.shape == (101, 8) and float(after[3, 0]) == 2.0 and float(after[7, 0]) == 1.0


def test_a_csv_line_with_another_number_of_fields_names_the_expected_columns(all_types):
    import tensorflow as tf

    _, meta = all_types
    spec = FeatureSpec.from_metadata(meta)
    names = [n for n, _ in spec.csv_columns]
    good = ",".join("" for _ in names)
    assert spec.parse_csv(tf.constant([good, '"a, b"' + good]))  # a quoted comma is no separator
    with pytest.raises(tf.errors.InvalidArgumentError) as caught:
        spec.parse_csv(tf.constant([good, good + ",extra"]))
    text = str(caught.value)
    assert f"every line must have {len(names)} comma-separated fields" in text
    assert ", ".join(names[:3]) in text
