"""Export a trained model as a SavedModel that takes raw feature values.

The export holds the whole model — preprocessing included — so a serving system sends the
CSV's values and gets probabilities back. Two signatures::

    serving_default(**features)   # one tensor per feature, [batch] each:
                                  #   numeric columns float32 (NaN = missing),
                                  #   string columns string ("" = missing)
    predict_csv(lines)            # string [batch]: raw CSV lines (UTF-8) in the source's
                                  #   column order and dialect (delimiter, decimal mark,
                                  #   padded fields), no header (the label is ignored),
                                  #   each with or without its line end

``serving_default`` takes each feature by the column's own name when TensorFlow accepts it
as a signature input (ASCII ``[A-Za-z][A-Za-z0-9_]*``, not a Python keyword), else by a name
derived from it (``Delta 15 N (o/oo)`` → ``Delta_15_N_o_oo_<8 hex>``; see
:mod:`shardtrain.train.names`). ``shardtrain_model.json`` beside the SavedModel lists every
input as ``{"column": ..., "input": ..., "dtype": ...}``; a restored module's ``serve``
function also takes a dict keyed by the columns' own names.

An image model has one signature, ``serving_default(image)``: ``image`` is a string
``[batch]`` of encoded JPEG/PNG bytes, decoded and resized inside the model.

A classifier's signatures return ``probabilities`` (float32 ``[batch, num_classes]``,
columns in the order of ``classes``), ``class_ids`` (int64 ``[batch]``) and ``classes``
(string ``[batch]``, the predicted label value). A regression's return ``predictions``
(float32 ``[batch]``): the predicted label value in the label's own units (the model's
standardised output times the label's standard deviation plus its mean, as
``shardtrain_model.json``'s ``feature_spec`` records them).

The training dataset's schema and statistics go beside the SavedModel as
``training_data.json`` (:mod:`shardtrain.data.profile`), and with it into every published
version: a later run checks new data against what the model was trained on
(``shardtrain validate NEW --against MODEL``) even once that dataset is gone.

Layout in the model directory (``export/latest.json`` is written last, so a reader never
picks up a half-uploaded export)::

    MODEL_DIR/export/<unix-seconds>/saved_model.pb, variables/, shardtrain_model.json,
                                    training_data.json
    MODEL_DIR/export/latest.json   {"path": "export/<unix-seconds>", "step": N, ...}

``shardtrain_model.json`` is uploaded last: a folder without it is an upload that failed or
runs. A failed upload deletes its folder; the next export deletes older folders without it
(an exporter killed mid-upload), so ``export/`` holds complete exports only.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import tempfile
import time
from dataclasses import asdict
from typing import Any

from shardtrain import documents, storage
from shardtrain.data.profile import write_profile
from shardtrain.errors import NotCommittedError, StorageError
from shardtrain.train.features import FeatureSpec
from shardtrain.train.models import model_inputs

log = logging.getLogger(__name__)

EXPORT_POINTER = "latest.json"
MODEL_INFO = "shardtrain_model.json"


def _serving_module(model: Any, spec: FeatureSpec):
    import tensorflow as tf

    classes = tf.constant(list(spec.classes) or [""])

    def outputs(features):
        logits = model(model_inputs(model, features), training=False)
        if spec.is_regression:
            return {"predictions": spec.destandardize(logits)}
        if spec.is_binary:
            p1 = tf.sigmoid(tf.reshape(logits, [-1]))
            probs = tf.stack([1.0 - p1, p1], axis=1)
        else:
            probs = tf.nn.softmax(logits, axis=-1)
        ids = tf.argmax(probs, axis=1)
        return {"probabilities": probs, "class_ids": ids, "classes": tf.gather(classes, ids)}

    class ServingModule(tf.Module):
        def __init__(self):
            super().__init__(name="shardtrain_serving")
            self.model = model

        @tf.function(input_signature=[spec.input_signature()])
        def serve(self, features):
            return outputs(spec.model_features(features))

        @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="lines")])
        def predict_csv(self, lines):
            return outputs(spec.parse_csv(lines))

    class ImageServingModule(tf.Module):
        def __init__(self):
            super().__init__(name="shardtrain_image_serving")
            self.model = model

        @tf.function(input_signature=[spec.input_signature()])
        def serve(self, features):
            assert spec.image is not None
            name = spec.image.name
            return outputs({name: spec.decode_images(features[name])})

    return ServingModule() if spec.image is None else ImageServingModule()


def serving_inputs(spec: FeatureSpec) -> list[dict[str, str]]:
    """``serving_default``'s inputs: ``[{"column", "input", "dtype"}]``, one per feature.

    ``input`` is the signature's name for the column (its own name when TensorFlow takes
    it); ``dtype`` is ``float32`` or ``string``.
    """
    if spec.image is not None:
        return [{"column": spec.image.name, "input": spec.image.name, "dtype": "string"}]
    out = [
        {"column": f.name, "input": f.input_name, "dtype": "float32"}
        for f in spec.numeric
        if not f.source
    ]
    strings = [(f.name, f.input_name) for f in spec.categorical]
    strings += [(f.name, f.input_name) for f in spec.dates]
    out += [{"column": n, "input": i, "dtype": "string"} for n, i in strings]
    return out


#: Local staging folders of exports: the prefix, the exporting process's pid, a random tail.
_STAGING_PREFIX = "shardtrain-export-"


def _remove_orphaned_staging() -> None:
    """Delete the staging folders of exporting processes that no longer run (a kill -9
    during an export leaves its folder behind; the next export on the machine cleans up)."""
    root = tempfile.gettempdir()
    with contextlib.suppress(OSError):
        for name in os.listdir(root):
            pid = name.removeprefix(_STAGING_PREFIX).split("-", 1)[0]
            if not name.startswith(_STAGING_PREFIX) or not pid.isdigit():
                continue
            try:
                os.kill(int(pid), 0)
            except ProcessLookupError:
                shutil.rmtree(os.path.join(root, name), ignore_errors=True)
            except OSError:
                pass  # alive under another user


def export_saved_model(
    model: Any,
    spec: FeatureSpec,
    model_dir: str,
    *,
    step: int,
    extra: dict | None = None,
    dataset: str | None = None,
) -> str:
    """Save ``model`` with serving signatures and publish it under ``MODEL_DIR/export/``.

    Args:
        model: the trained Keras model (outside any distribution strategy).
        spec: the features and label it was trained on.
        model_dir: the model directory URI.
        step: the global step of the weights (recorded in the pointer).
        extra: more facts for ``shardtrain_model.json`` (e.g. the training config).
        dataset: the training dataset's URI: its schema and statistics are saved with the
            model (``training_data.json``); None saves none.

    Returns:
        The export's URI.
    """
    import tensorflow as tf

    module = _serving_module(model, spec)
    version = str(int(time.time()))
    _remove_orphaned_staging()
    local = tempfile.mkdtemp(prefix=f"{_STAGING_PREFIX}{os.getpid()}-")
    try:
        path = os.path.join(local, version)
        signatures = {"serving_default": module.serve}
        if spec.image is None:
            signatures["predict_csv"] = module.predict_csv
        tf.saved_model.save(module, path, signatures=signatures)
        info = {
            "step": step,
            "inputs": serving_inputs(spec),
            "feature_spec": asdict(spec),
            **(extra or {}),
        }
        # Beside the SavedModel's folder, not in it: it is uploaded last (see _upload).
        info_file = os.path.join(local, MODEL_INFO)
        with open(info_file, "w") as f:
            json.dump(info, f, indent=2, default=str)
        if dataset is not None:
            write_profile(path, dataset)
        target = storage.join(model_dir, "export", version)
        _upload(path, info_file, target)
    finally:
        shutil.rmtree(local, ignore_errors=True)
    storage.write_json(
        storage.join(model_dir, "export", EXPORT_POINTER),
        {"path": f"export/{version}", "step": step, "time": time.time()},
    )
    log.info("exported SavedModel (step %d) to %s", step, target)
    try:
        _remove_incomplete_exports(model_dir, version)
    except StorageError as exc:  # published already: a leftover is no reason to fail
        log.warning("%s: partial exports not removed: %s", model_dir, exc)
    return target


def _upload(saved_model: str, info_file: str, target: str) -> None:
    """Upload the staged export to ``target``, ``shardtrain_model.json`` last: an export
    folder holding it is complete. A failed upload (a full disk, a lost connection, a
    SIGTERM) deletes what it wrote, so a rerun leaves no partial export behind."""
    try:
        storage.upload_dir(saved_model, target)
        storage.upload_file(info_file, storage.join(target, MODEL_INFO))
    except BaseException:
        try:
            storage.delete(target, recursive=True)
        except Exception as exc:  # the next export removes it (_remove_incomplete_exports)
            log.warning("%s: partial export not removed: %s", target, exc)
        raise


def _remove_incomplete_exports(model_dir: str, published: str) -> None:
    """Delete the export folders older than ``published`` that lack ``shardtrain_model.json``:
    what an exporter killed mid-upload (kill -9, a lost node) left behind. Newer folders are
    left alone: they may be another exporter's upload in progress."""
    for uri in storage.ls(storage.join(model_dir, "export")):
        version = storage.basename(uri)
        if not version.isdigit() or int(version) >= int(published):
            continue
        if not storage.exists(storage.join(uri, MODEL_INFO)):
            log.info("removing the partial export %s (an earlier export stopped mid-upload)", uri)
            storage.delete(uri, recursive=True)


def latest_export(model_dir: str) -> dict[str, Any]:
    """The pointer to the newest complete export, with its absolute ``uri`` added.

    Raises:
        NotCommittedError: no export has been published in ``model_dir``.
    """
    pointer = storage.join(model_dir, "export", EXPORT_POINTER)
    if not storage.exists(pointer):
        raise NotCommittedError(f"{model_dir}: no exported model (export/{EXPORT_POINTER})")
    data = documents.check(storage.read_json(pointer), documents.EXPORT_POINTER, pointer)
    return {**data, "uri": storage.join(model_dir, data["path"])}
