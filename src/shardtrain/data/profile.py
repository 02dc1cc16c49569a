"""What a model was trained on: its dataset's schema and statistics, kept with the model.

The export saves :data:`TRAINING_DATA` beside every SavedModel (and the serving location
gets it with the published version), so that a later run can compare new data with "what
the served model was trained on" (:mod:`shardtrain.data.validation`) after the training
dataset itself has been deleted or re-sharded::

    MODEL_DIR/export/<version>/training_data.json   {"uri": ..., "metadata": {...}}
    SERVING_URI/<version>/training_data.json        (copied with the version)

``metadata`` is the dataset's ``metadata.json`` without its shard lists (schema, label,
statistics, row counts and splits' sizes).

:func:`load_profile` reads the dataset side of a comparison from any of the places a user
points at: a dataset, a SavedModel version, a serving location (``latest.json`` names its
version) or a model directory (``export/latest.json`` names its newest export).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from shardtrain import storage
from shardtrain.data.metadata import METADATA_NAME, DatasetMetadata
from shardtrain.errors import DataError

#: The file beside a SavedModel holding its training data's schema and statistics.
TRAINING_DATA = "training_data.json"
#: The pointer a serving location and a model directory's ``export/`` have to their newest
#: version: ``{"path": <relative path of the version>, ...}``.
POINTER = "latest.json"


@dataclass(frozen=True)
class DataProfile:
    """A dataset's schema and statistics, and where they were read.

    Attributes:
        uri: the dataset's URI.
        metadata: its metadata (shard lists left out when read from a model).
        source: where it was read: the dataset, or the model's ``training_data.json``.
    """

    uri: str
    metadata: DatasetMetadata
    source: str


def profile_document(dataset_uri: str, meta: DatasetMetadata) -> dict[str, Any]:
    """The JSON of :data:`TRAINING_DATA` for the dataset at ``dataset_uri``."""
    doc = meta.to_dict()
    for split in doc["splits"].values():
        split["shards"] = []
    return {"uri": dataset_uri, "metadata": doc}


def write_profile(target: str, dataset_uri: str) -> str:
    """Save the schema and statistics of the dataset at ``dataset_uri`` as
    ``target/training_data.json``; returns the file's URI.

    Raises:
        NotCommittedError, DataError: the dataset is incomplete or not a dataset.
    """
    uri = storage.join(target, TRAINING_DATA)
    storage.write_json(uri, profile_document(dataset_uri, DatasetMetadata.load(dataset_uri)))
    return uri


def _read_profile(uri: str) -> DataProfile:
    doc = storage.read_json(uri)
    if not isinstance(doc, dict) or "metadata" not in doc:
        raise DataError(f"{uri}: not a shardtrain {TRAINING_DATA} (no 'metadata')")
    meta = DatasetMetadata.from_dict(doc["metadata"], where=uri)
    return DataProfile(uri=str(doc.get("uri", "")), metadata=meta, source=uri)


def _pointed(base: str, pointer: str) -> str | None:
    """The directory ``pointer`` (a ``latest.json``) names relative to ``base``, if any."""
    if not storage.exists(pointer):
        return None
    doc = storage.read_json(pointer)
    path = doc.get("path") if isinstance(doc, dict) else None
    if not isinstance(path, str) or not path:
        raise DataError(f"{pointer}: names no version ('path')")
    return storage.join(base, path)


def model_version(uri: str) -> str | None:
    """The SavedModel version directory ``uri`` stands for: itself when it holds
    ``saved_model.pb`` or :data:`TRAINING_DATA`, the version its ``latest.json`` (a serving
    location) or ``export/latest.json`` (a model directory) names; None otherwise."""
    if storage.exists(storage.join(uri, TRAINING_DATA)) or storage.exists(
        storage.join(uri, "saved_model.pb")
    ):
        return uri
    for pointer in (storage.join(uri, POINTER), storage.join(uri, "export", POINTER)):
        version = _pointed(uri, pointer)
        if version is not None:
            return version
    return None


def load_profile(uri: str) -> DataProfile:
    """The schema and statistics at ``uri``: a dataset's, or those a model was trained on
    (see the module docstring for the places looked at).

    Raises:
        DataError: ``uri`` is neither, or the model was exported without them.
        StorageError: the storage cannot be read.
    """
    if storage.exists(storage.join(uri, METADATA_NAME)):
        return DataProfile(uri=uri, metadata=DatasetMetadata.load(uri), source=uri)
    version = model_version(uri)
    if version is None:
        raise DataError(
            f"{uri}: neither a dataset (no {METADATA_NAME}) nor a model (no saved_model.pb, "
            f"{TRAINING_DATA}, {POINTER} or export/{POINTER})"
        )
    file = storage.join(version, TRAINING_DATA)
    if not storage.exists(file):
        raise DataError(
            f"{version}: the model carries no schema and statistics of its training data "
            f"(no {TRAINING_DATA}: exported by an earlier shardtrain); compare with its "
            "dataset instead"
        )
    return _read_profile(file)
