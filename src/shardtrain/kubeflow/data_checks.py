"""The pipeline's data checks: the new dataset against the data the served model was
trained on, in the step that commits it (:func:`shardtrain.kubeflow.shard_steps.settle_step`
when no shard worker runs again, else :func:`~shardtrain.kubeflow.shard_steps.finalize_step`).

The served model is the version ``serving_uri/latest.json`` names, and its training data
the ``training_data.json`` the export saved with it (:mod:`shardtrain.data.profile`); the
checks are those of ``shardtrain validate`` (:mod:`shardtrain.data.validation`).
"""

from __future__ import annotations

import logging
import os

from shardtrain import storage
from shardtrain.data import profile, validation
from shardtrain.data.validation import Validation
from shardtrain.errors import ConfigError

log = logging.getLogger(__name__)

#: The data checks' outcome, beside the dataset's metadata.json.
DATA_CHECKS_NAME = "data_checks.json"
#: What ``data_checks`` may be.
DATA_CHECK_MODES = validation.DATA_CHECK_MODES


def data_checks_step(
    dataset_uri: str, serving_uri: str, *, mode: str, limits: str, report_path: str | None
) -> Validation | None:
    """Compare the dataset with the training data of the model served at ``serving_uri``.

    The served model is the version ``serving_uri/latest.json`` names, and its training data
    the ``training_data.json`` the export saved with it. With nothing served yet (the first
    run), or a model exported without its training data's statistics, there is nothing to
    compare with: the check passes with a note. The outcome is written to
    ``dataset_uri/data_checks.json`` and, as Markdown, to ``report_path``.

    Args:
        dataset_uri: the new dataset.
        serving_uri: the serving location ('' → no check).
        mode: ``fail`` raises when a check fails (the run stops before training), ``warn``
            logs the failure and goes on, ``off`` checks nothing.
        limits: the checks' limits (:meth:`~shardtrain.data.validation.Limits.parse`).
        report_path: where the Markdown report goes (None: nowhere).

    Returns:
        The validation, or None when nothing was compared.

    Raises:
        ConfigError: an unknown mode or a malformed limit.
        DataChecksFailed: a check failed in ``fail`` mode.
    """
    if mode not in DATA_CHECK_MODES:
        raise ConfigError(f"data_checks must be one of {', '.join(DATA_CHECK_MODES)}, not '{mode}'")
    parsed = validation.Limits.parse(limits)
    baseline = _served_training_data(serving_uri) if mode != "off" else None
    if mode == "off" or isinstance(baseline, str):
        note = "data checks are off" if mode == "off" else str(baseline)
        log.info("data checks: %s", note)
        _write_report(report_path, f"# Data checks: `{dataset_uri}`\n\n**Passed**: {note}.\n")
        storage.write_json(
            storage.join(dataset_uri, DATA_CHECKS_NAME),
            {"passed": True, "new": dataset_uri, "baseline": None, "notes": [note]},
        )
        return None
    assert baseline is not None
    result = validation.validate(profile.load_profile(dataset_uri), baseline, parsed)
    text = result.to_markdown()
    if not result.passed:
        verdict = "the run stops here" if mode == "fail" else "warn mode: the run goes on"
        text += f"\n**data_checks={mode}**: {verdict}.\n"
    _write_report(report_path, text)
    validation.write_json(result, storage.join(dataset_uri, DATA_CHECKS_NAME))
    if result.passed:
        log.info("%s", result.summary())
    elif mode == "fail":
        raise validation.DataChecksFailed(result.summary())
    else:
        log.warning("%s (data_checks=warn: going on)", result.summary())
    return result


def _served_training_data(serving_uri: str) -> profile.DataProfile | str:
    """The training data of the model served at ``serving_uri``, or why there is none."""
    if not serving_uri:
        return "no serving_uri: nothing served to compare with"
    if not storage.exists(storage.join(serving_uri, profile.POINTER)):
        return f"nothing served at {serving_uri} yet (first run): nothing to compare with"
    version = profile.model_version(serving_uri)
    if version is None or not storage.exists(storage.join(version, profile.TRAINING_DATA)):
        return (
            f"the model served at {serving_uri} carries no statistics of its training data "
            f"(no {profile.TRAINING_DATA}: exported by an earlier shardtrain): nothing to "
            "compare with"
        )
    return profile.load_profile(version)


def _write_report(path: str | None, text: str) -> None:
    if path:
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
