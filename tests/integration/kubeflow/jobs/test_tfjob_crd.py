"""Every TFJob shape the generator writes validates against the real TFJob CRD's schema.

The CRD is the one the pinned training operator (v1.9.4) installs, fetched from its Go module
by ``scripts/install-tfjob-crd``. Two checks, as the API server makes them: the openAPI v3
schema (types, required fields, patterns), and structural pruning: a field the schema does
not know is silently dropped by the API server, so a misplaced ``schedulerName`` or
``suspend`` would be lost without an error. Here it is an error. (The CEL rules, e.g. "queue
is immutable", apply to updates only.)
"""

from __future__ import annotations

import functools
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from tfjob_examples import EXAMPLES, example_manifests

SCRIPT = Path(__file__).resolve().parents[4] / "scripts" / "install-tfjob-crd"


@functools.cache
def _schema() -> dict[str, Any]:
    proc = subprocess.run([str(SCRIPT)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"scripts/install-tfjob-crd failed:\n{proc.stderr}"
    crd = yaml.safe_load(Path(proc.stdout.strip()).read_text())
    assert crd["spec"]["names"]["kind"] == "TFJob"
    (v1,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1"]
    return v1["schema"]["openAPIV3Schema"]


def _pruned(value: Any, schema: dict[str, Any], path: str = "") -> Iterator[str]:
    """Paths of fields the API server would prune from ``value`` under ``schema``."""
    if schema.get("x-kubernetes-preserve-unknown-fields"):
        return
    if isinstance(value, dict):
        props = schema.get("properties")
        extra = schema.get("additionalProperties")
        if props is None:
            if isinstance(extra, dict):
                for key, item in value.items():
                    yield from _pruned(item, extra, f"{path}.{key}")
            return
        for key, item in value.items():
            if key in props:
                if path == "" and key == "metadata":
                    continue  # ObjectMeta: validated by the API server itself
                yield from _pruned(item, props[key], f"{path}.{key}")
            else:
                yield f"{path}.{key}".lstrip(".")
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(value):
            yield from _pruned(item, schema["items"], f"{path}[{i}]")


def _check(manifest: dict[str, Any]) -> None:
    jsonschema.Draft7Validator(_schema()).validate(manifest)
    assert list(_pruned(manifest, _schema())) == []


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_every_rendered_shape_fits_the_crd(name):
    _check(example_manifests()[name])


def test_the_queue_fields_sit_where_the_crd_has_them():
    manifests = example_manifests()
    kueue, gang = manifests["kueue-priority"], manifests["volcano-queue-priority"]
    run_policy = _schema()["properties"]["spec"]["properties"]["runPolicy"]["properties"]
    assert run_policy["suspend"]["type"] == "boolean"
    assert set(gang["spec"]["runPolicy"]["schedulingPolicy"]) <= set(
        run_policy["schedulingPolicy"]["properties"]
    )
    assert kueue["spec"]["runPolicy"]["suspend"] is True
    assert gang["spec"]["runPolicy"]["schedulingPolicy"]["minAvailable"] == 1 + 3 + 1


@pytest.mark.parametrize(
    ("edit", "complaint"),
    [
        (lambda m: m["spec"]["runPolicy"].update(suspend="true"), "is not of type 'boolean'"),
        (
            lambda m: m["spec"]["runPolicy"].update(schedulingPolicy={"minAvailable": "all"}),
            "is not of type 'integer'",
        ),
        (
            lambda m: m["spec"]["tfReplicaSpecs"]["Chief"].update(replicas="1"),
            "is not of type 'integer'",
        ),
    ],
)
def test_the_schema_check_catches_wrong_types(edit, complaint):
    manifest = example_manifests()["volcano"]
    edit(manifest)
    with pytest.raises(jsonschema.ValidationError, match=complaint):
        _check(manifest)


def test_the_pruning_check_catches_a_misplaced_field():
    manifest = example_manifests()["volcano"]
    manifest["spec"]["schedulerName"] = "volcano"  # belongs in the pod templates
    manifest["spec"]["runPolicy"]["schedulingPolicy"]["minMember"] = 4  # Volcano's, not ours
    assert sorted(_pruned(manifest, _schema())) == [
        "spec.runPolicy.schedulingPolicy.minMember",
        "spec.schedulerName",
    ]
