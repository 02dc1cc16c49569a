"""The training operator's webhook rules and TensorFlow's, as validate() applies them."""

from __future__ import annotations

import pytest

from shardtrain.errors import ConfigError
from shardtrain.kubeflow.jobs import tfjob
from shardtrain.train import cluster
from tfjob_examples import container_of, make_manifest, replica_specs


def _broken(edit) -> dict:
    manifest = make_manifest()
    edit(manifest)
    return manifest


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda m: m["metadata"].update(name="Quest"), "metadata.name must be a DNS-1035"),
        (lambda m: m["metadata"].update(name="q" * 64), "metadata.name must be a DNS-1035"),
        (lambda m: m["metadata"].update(name="q" * 55), "longer than 63 characters"),
        (
            lambda m: container_of(m, "Worker").update(name="trainer"),
            "Worker: needs a container named 'tensorflow'",
        ),
        (
            lambda m: container_of(m, "Chief").pop("image"),
            "Chief.template.spec.containers[0].image",
        ),
        (
            lambda m: replica_specs(m)["Chief"]["template"]["spec"].update(containers=[]),
            "containers must be specified",
        ),
        (
            lambda m: replica_specs(m).update(Master=replica_specs(m)["Chief"]),
            "both Chief and Master",
        ),
        (
            lambda m: replica_specs(m).update(worker=replica_specs(m).pop("Worker")),
            "unknown replica type",
        ),
        (lambda m: replica_specs(m)["Chief"].update(replicas=2), "TensorFlow allows one chief"),
        (lambda m: replica_specs(m)["Evaluator"].update(replicas=2), "allows one evaluator"),
        (lambda m: replica_specs(m)["Worker"].update(restartPolicy="Sometimes"), "restartPolicy"),
        (lambda m: m["spec"]["runPolicy"].update(cleanPodPolicy="Some"), "cleanPodPolicy"),
        (lambda m: m["spec"]["runPolicy"].update(backoffLimit=-1), "backoffLimit"),
        (lambda m: m["spec"].update(tfReplicaSpecs={}), "tfReplicaSpecs is required"),
        (lambda m: m.update(kind="PyTorchJob"), "apiVersion/kind"),
    ],
)
def test_validate_enforces_the_webhook_rules(edit, message):
    manifest = _broken(edit)
    with pytest.raises(ConfigError) as err:
        tfjob.validate(manifest)
    assert message in str(err.value)
    assert "\n" not in str(err.value)


def test_validate_accepts_what_the_generator_writes():
    for overrides in ({}, {"workers": 0, "evaluator": False}, {"name": "q" * 50}):
        tfjob.validate(make_manifest(**overrides))


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda m: m["spec"]["runPolicy"].update(suspend="yes"), "suspend must be true or false"),
        (
            lambda m: m["spec"]["runPolicy"].update(schedulingPolicy={"minAvailable": 5}),
            r"minAvailable must be between 1 and the job's 4 replicas",
        ),
        (
            lambda m: m["spec"]["runPolicy"].update(schedulingPolicy={"minAvailable": 0}),
            "minAvailable must be between 1",
        ),
    ],
)
def test_validate_checks_suspend_and_the_gang_size(edit, message):
    m = make_manifest()
    edit(m)
    with pytest.raises(ConfigError, match=message):
        tfjob.validate(m)


def test_replica_types_are_the_clusters_in_the_tfjob_spelling():
    assert tfjob.REPLICA_TYPES == ("Chief", "Master", "Worker", "PS", "Evaluator")
    assert [t.lower() for t in tfjob.REPLICA_TYPES] == list(cluster.REPLICA_TYPES)
