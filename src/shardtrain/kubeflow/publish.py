"""Publishing a blessed SavedModel at the serving location, and the pointer to what is served.

The serving location (``serving_uri``) holds integer version directories, as TensorFlow
Serving and KServe expect (``<base>/<version>/saved_model.pb``), and ``latest.json`` naming the
served one, which the next run's evaluation takes as its baseline. TF Serving serves the
*highest* integer version, so the pointer must never name a lower one: two overlapping runs
publish in either order, and the pointer ends at the higher committed version whatever the
order (:func:`point_latest`).

Between the evaluate step (which blessed the candidate against the served model) and the
export step, another run may publish: :func:`check_still_served` refuses to publish a
candidate blessed against a model that is no longer the one served.
"""

from __future__ import annotations

import logging
from typing import Any

from shardtrain import documents, storage
from shardtrain.errors import DataError, NotCommittedError, StaleDecisionError
from shardtrain.kubeflow.serving import version_number
from shardtrain.train.blessing import BLESSING_NAME, SERVING_POINTER

log = logging.getLogger(__name__)


def _relative_files(uri: str) -> list[tuple[str, str]]:
    """``(absolute URI, path relative to uri)`` of every file under ``uri``."""
    _, base = storage.filesystem(uri)
    base = base.rstrip("/")
    files = []
    for src in storage.walk_files(uri):
        _, path = storage.filesystem(src)
        files.append((src, path[len(base) :].lstrip("/")))
    return files


def publish_export(export_uri: str, serving_uri: str, *, step: int | None = None) -> str:
    """Copy the SavedModel at ``export_uri`` to ``serving_uri/<version>/``, publish-last.

    ``<version>`` is the export's own name (its Unix time, the integer version directory TF
    Serving and KServe expect). Object stores cannot rename a directory into place, so the
    copy is ordered: the variables and assets first, ``saved_model.pb`` after them (a server
    polling the directory finds a loadable model or none), then the manifest
    ``_MANIFEST.json`` listing every file (the commit), and last ``serving_uri/latest.json``
    pointing at the version (:func:`point_latest`: not when a higher version is committed).
    A version already published from the same export is not copied again; its pointer is
    written if a crash left it out.

    Args:
        export_uri: a SavedModel directory (``MODEL_DIR/export/<version>``).
        serving_uri: the serving base location (local, ``s3://``, ``gs://``).
        step: the training step of the export (recorded in the manifest and pointer).

    Returns:
        The URI of the published version.

    Raises:
        StorageError: the export is missing or the copy failed.
    """
    version = storage.basename(export_uri)
    target = storage.join(serving_uri, version)
    if storage.is_committed(target):
        manifest = storage.read_committed(target)
        if manifest.get("source") == export_uri:
            log.info("%s is already published from %s", target, export_uri)
            point_latest(serving_uri, version, step=manifest.get("step", step), source=export_uri)
            return target
        log.warning("%s holds another export (%s): replacing it", target, manifest.get("source"))
        storage.delete(storage.join(target, storage.MANIFEST_NAME))
    files = _relative_files(export_uri)
    if not any(rel == "saved_model.pb" for _, rel in files):
        raise DataError(f"{export_uri}: not a SavedModel (no saved_model.pb)")
    files.sort(key=lambda f: (f[1] == "saved_model.pb", f[1]))
    listed = []
    for src, rel in files:
        storage.copy(src, storage.join(target, rel))
        listed.append({"path": rel, "bytes": storage.size(src)})
    storage.publish(target, {"source": export_uri, "step": step, "files": listed})
    point_latest(serving_uri, version, step=step, source=export_uri)
    log.info("published %s (%d files) from %s", target, len(listed), export_uri)
    return target


def _highest_committed(serving_uri: str) -> tuple[int, str] | None:
    """The highest integer version committed at ``serving_uri``: ``(number, name)``."""
    found = []
    for uri in storage.ls(serving_uri):
        name = storage.basename(uri.rstrip("/"))
        number = version_number(name)
        if number is not None and storage.is_committed(uri):
            found.append((number, name))
    return max(found, default=None)


def _pointer(serving_uri: str, name: str) -> dict[str, Any]:
    """The pointer to the committed version ``name`` (its step and source from its manifest)."""
    manifest = storage.read_committed(storage.join(serving_uri, name))
    step, source = manifest.get("step"), manifest.get("source")
    return {"version": name, "path": name, "step": step, "source": source}


def point_latest(serving_uri: str, version: str, *, step: int | None, source: str) -> None:
    """Make ``serving_uri/latest.json`` name ``version`` — or the higher committed version TF
    Serving serves instead, if there is one (said in one line).

    Written only when it does not already say so, and checked once more after writing: a
    higher version committed meanwhile by an overlapping run is pointed at then (that run,
    whose own check comes after its commit, points at it too), so the pointer never stays
    below the highest committed version.
    """
    pointer_uri = storage.join(serving_uri, SERVING_POINTER)
    ours = {"version": version, "path": version, "step": step, "source": source}
    number = version_number(version)
    said = False
    for _ in range(2):
        wanted = ours
        highest = _highest_committed(serving_uri) if number is not None else None
        if highest is not None and number is not None and highest[0] > number:
            wanted = _pointer(serving_uri, highest[1])
            if not said:
                log.warning(
                    "%s stays at version %s, not %s: it is higher, and TF Serving serves the "
                    "highest version",
                    pointer_uri,
                    highest[1],
                    version,
                )
                said = True
        current = _serving_pointer(pointer_uri)
        if current == wanted:
            return
        storage.write_json(pointer_uri, wanted)


def _serving_pointer(pointer_uri: str) -> dict[str, Any] | None:
    """``SERVING_URI/latest.json`` (:data:`~shardtrain.documents.SERVING_POINTER`), None when
    nothing was published."""
    if not storage.exists(pointer_uri):
        return None
    return documents.check(storage.read_json(pointer_uri), documents.SERVING_POINTER, pointer_uri)


def check_still_served(model_dir: str, serving_uri: str, export_uri: str) -> None:
    """The candidate may be published: ``MODEL_DIR/eval/blessing.json`` blessed this export,
    against the model ``serving_uri/latest.json`` still names (or nothing, if nothing was
    published then and still is not).

    Raises:
        NotCommittedError: no ``blessing.json`` (the model was never evaluated).
        StaleDecisionError: not blessed, blessed another export, or the served model changed
            since the blessing (another run published meanwhile): evaluate again.
    """
    blessing_uri = storage.join(model_dir, "eval", BLESSING_NAME)
    if not storage.exists(blessing_uri):
        raise NotCommittedError(f"{blessing_uri}: missing; evaluate the model before publishing")
    blessing = documents.check(storage.read_json(blessing_uri), documents.BLESSING, blessing_uri)
    if not blessing.get("blessed"):
        raise StaleDecisionError(f"{blessing_uri}: not blessed ({blessing.get('summary')})")
    blessed = (blessing.get("candidate") or {}).get("export")
    if blessed != export_uri:
        raise StaleDecisionError(
            f"{blessing_uri} blessed {blessed}, not the newest export {export_uri}: evaluate again"
        )
    pointer_uri = storage.join(serving_uri, SERVING_POINTER)
    now = _serving_pointer(pointer_uri)
    if now is not None and now.get("source") == export_uri:
        return  # this export is already served (a re-run after its publication)
    then = blessing.get("baseline")
    served_then = None if then is None else (then.get("version"), then.get("source"))
    served_now = None if now is None else (now.get("version"), now.get("source"))
    if served_then != served_now:
        what = "nothing" if then is None else f"version {then.get('version')}"
        current = "nothing" if now is None else f"version {now.get('version')}"
        raise StaleDecisionError(
            f"{serving_uri} serves {current}, not {what} that {export_uri} was blessed against "
            "(another run published since): not publishing; evaluate again"
        )
