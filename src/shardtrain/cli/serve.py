"""``shardtrain serve render``: the KServe InferenceService (and its ServiceAccount) that serves
a published model.

The options are the settings of :class:`shardtrain.kubeflow.serving.ServingConfig`, named as
``tfjob render``'s where they mean the same (``--name``, ``--namespace``, ``--secret``,
``--service-account``, ``--cpu``, ``--memory``); a setting left out keeps its default, which
``--help`` shows (read only then, see :class:`~shardtrain.cli.jobs.SettingsOption`).
"""

from __future__ import annotations

from typing import Any

import click

from shardtrain.cli.jobs import SettingsOption


def _serving_config() -> Any:
    from shardtrain.kubeflow.serving import ServingConfig

    return ServingConfig


def _d(name: str, text: str) -> dict[str, Any]:
    """Keyword arguments of ``click.option`` for help ``text`` + the default of ``name``."""
    return {"cls": SettingsOption, "default_of": name, "settings": _serving_config, "help": text}


@click.group("serve")
def serve_group() -> None:
    """Serving with KServe: render the InferenceService of a published model."""


@serve_group.command("render")
@click.option(
    "--serving-uri",
    required=True,
    help="The serving base the export step publishes to (s3:// or gs://; holds "
    "<version>/ and latest.json): the predictor's storageUri.",
)
@click.option("--name", default=None, **_d("name", "InferenceService name (and model name)."))
@click.option("--namespace", default=None, **_d("namespace", "Namespace."))
@click.option(
    "--secret",
    default=None,
    **_d(
        "secret",
        "s3:// only: the storage Secret (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY) the "
        "ServiceAccount lists for KServe's storage initializer ('' for none, e.g. IRSA); "
        "gs:// takes none",
    ),
)
@click.option(
    "--service-account",
    default=None,
    **_d("service_account", "The predictor's ServiceAccount (rendered too)."),
)
@click.option(
    "--gcp-service-account",
    default=None,
    **_d(
        "gcp_service_account",
        "gs:// on GKE: the Google service account the ServiceAccount acts as (Workload "
        "Identity annotation).",
    ),
)
@click.option("--cpu", default=None, **_d("cpu", "CPU request and limit of the model server."))
@click.option("--memory", default=None, **_d("memory", "Memory request and limit."))
@click.option(
    "--gpus",
    type=click.IntRange(min=0),
    default=None,
    **_d("gpus", "nvidia.com/gpu limit (0: CPU only); GPUs select the -gpu runtime image."),
)
@click.option(
    "--runtime-version",
    default=None,
    help="tensorflow/serving tag (runtimeVersion) [default: the runtime's own; with --gpus, "
    "its -gpu tag].",
)
@click.option(
    "--min-replicas",
    type=click.IntRange(min=0),
    default=None,
    **_d("min_replicas", "Fewest predictor pods (0: scale to zero when idle, serverless)."),
)
@click.option(
    "--max-replicas",
    type=click.IntRange(min=1),
    default=None,
    **_d("max_replicas", "Most predictor pods."),
)
@click.option(
    "--check/--no-check",
    default=True,
    show_default=True,
    help="Read the serving base first: latest.json names an integer version with "
    "saved_model.pb and variables/, the one TensorFlow Serving will serve.",
)
def serve_render_cmd(check: bool, **settings: Any) -> None:
    """Print the ServiceAccount and the KServe InferenceService (YAML) that serve the model
    published at --serving-uri with TensorFlow Serving (KServe's v1 protocol).

    Apply the output with `kubectl apply -f`. Clients POST {"instances": [{INPUT: value,
    ...}, ...]} to /v1/models/NAME:predict, one object per row keyed by the signature's input
    names (shardtrain_model.json's "inputs").

    Example: shardtrain serve render --serving-uri s3://b/serving/quest --gpus 1
    """
    from shardtrain.kubeflow import serving

    config = serving.ServingConfig.from_overrides(**settings)
    if check:
        published = serving.check_published(config.serving_uri)
        click.echo(
            f"# {published.base}: TensorFlow Serving serves version {published.version}"
            + (f" (step {published.step})" if published.step is not None else ""),
            err=True,
        )
    click.echo(serving.to_yaml(serving.render(config)), nl=False)
