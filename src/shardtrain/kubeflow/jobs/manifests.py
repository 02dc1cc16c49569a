"""Job manifests as files, dicts and SDK models, for any job API.

* :func:`is_manifest_path` and :func:`load_manifest`: the one job of a kind in a YAML/JSON
  file (``shardtrain run-local job.yaml``, ``shardtrain tfjob submit -f job.yaml``).
* :func:`to_manifest`, :func:`to_yaml` and :func:`from_dict`: SDK models (Kubeflow's and
  Kubernetes' OpenAPI models) to plain manifests and back; a field the SDK would silently
  drop is an error, so a misspelt ``restartPolcy`` is caught before a cluster ignores it.
* :func:`warn_about_local_paths`: pods cannot read this machine's files.
"""

from __future__ import annotations

import itertools
import json
import logging
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import yaml

from shardtrain.errors import ConfigError, one_line

log = logging.getLogger(__name__)


def is_manifest_path(args: Iterable[str]) -> bool:
    """True when ``args`` is a single ``.yaml``/``.yml``/``.json`` path (a job manifest).

    ``shardtrain run-local job.yaml`` runs a manifest; ``shardtrain run-local -- train …`` a
    command. No shardtrain command ends in ``.yaml``, so the two cannot be confused.
    """
    args = list(args)
    return len(args) == 1 and Path(args[0]).suffix.lower() in (".yaml", ".yml", ".json")


def load_manifest(path: str | Path, kind: str) -> dict[str, Any]:
    """The one job of ``kind`` in a YAML/JSON file (other documents, e.g. a ServiceAccount,
    are skipped).

    Raises:
        ConfigError: the file is missing or unreadable, or holds no such job or several.
    """
    try:
        text = Path(path).read_text(encoding="utf-8")
        docs = [d for d in yaml.safe_load_all(text) if d is not None]
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the {kind} manifest ({exc.strerror})") from exc
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML ({one_line(exc)})") from exc
    jobs = [d for d in docs if isinstance(d, Mapping) and d.get("kind") == kind]
    if len(jobs) != 1:
        raise ConfigError(f"{path}: expected one {kind}, found {len(jobs)}")
    others = [d.get("kind", "?") for d in docs if isinstance(d, Mapping) and d is not jobs[0]]
    if others:
        log.info("%s: using the %s; skipping %s", path, kind, ", ".join(map(str, others)))
    return dict(jobs[0])


def name_of(manifest: Mapping[str, Any]) -> str:
    """``metadata.name`` of a manifest, or ``<unnamed>``."""
    meta = manifest.get("metadata") or {}
    return str(meta.get("name", "<unnamed>")) if isinstance(meta, Mapping) else "<unnamed>"


def to_manifest(model: Any) -> dict[str, Any]:
    """An SDK model as a plain manifest dict (camelCase keys, unset fields left out)."""
    from kubeflow.training import ApiClient

    return ApiClient().sanitize_for_serialization(model)


def to_yaml(job: Any) -> str:
    """A job (model or manifest dict) as a YAML document, keys in the SDK's order."""
    manifest = dict(job) if isinstance(job, Mapping) else to_manifest(job)
    return yaml.safe_dump(manifest, sort_keys=False, default_flow_style=False)


class _Response:
    """What ``ApiClient.deserialize`` reads: an object with the JSON body in ``data``."""

    def __init__(self, obj: Any) -> None:
        self.data = json.dumps(obj)


def from_dict(manifest: Mapping[str, Any], model: str, kind: str) -> Any:
    """The SDK model named ``model`` (e.g. ``"KubeflowOrgV1TFJob"``) of a manifest.

    Raises:
        ConfigError: the SDK cannot read it, or would drop fields it does not know.
    """
    from kubeflow.training import ApiClient

    try:
        job = ApiClient().deserialize(_Response(manifest), model)
    except (ValueError, TypeError, AttributeError) as exc:
        raise ConfigError(f"{kind} {name_of(manifest)}: {one_line(exc)}") from exc
    dropped = list(_missing_paths(manifest, to_manifest(job)))
    if dropped:
        raise ConfigError(
            f"{kind} {name_of(manifest)}: unknown field(s) {', '.join(dropped[:5])}"
            + (" …" if len(dropped) > 5 else "")
        )
    return job


def _missing_paths(original: Any, kept: Any, path: str = "") -> Iterator[str]:
    """Paths of keys present in ``original`` but not in ``kept`` (values are not compared)."""
    if isinstance(original, Mapping):
        kept = kept if isinstance(kept, Mapping) else {}
        for key, value in original.items():
            sub = f"{path}.{key}" if path else str(key)
            if key not in kept:
                if value is not None:
                    yield sub
            else:
                yield from _missing_paths(value, kept[key], sub)
    elif isinstance(original, list) and isinstance(kept, list):
        for i, (a, b) in enumerate(zip(original, kept, strict=False)):
            yield from _missing_paths(a, b, f"{path}[{i}]")


def pod_containers(template_holder: Mapping[str, Any]) -> list[Any]:
    """The containers of the pod template under ``template_holder["template"]``."""
    template = template_holder.get("template")
    pod = template.get("spec") if isinstance(template, Mapping) else None
    containers = pod.get("containers") if isinstance(pod, Mapping) else None
    return list(containers) if isinstance(containers, list) else []


def warn_about_local_paths(containers: Iterable[Mapping[str, Any]]) -> None:
    """Pods cannot read this machine's files: warn when --data/--model-dir are plain paths."""
    seen = set()
    for container in containers:
        args = [str(a) for a in container.get("args") or ()]
        for flag, value in itertools.pairwise(args):
            if flag in ("--data", "--model-dir") and "://" not in value:
                seen.add((flag, value))
    for flag, value in sorted(seen):
        log.warning(
            "%s %s is a local path: pods can only read it from a mounted volume", flag, value
        )
