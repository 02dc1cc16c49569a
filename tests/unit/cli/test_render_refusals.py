"""Renders refuse what a pod would refuse: `tfjob render`, `trainjob render` and `serve
render` fail in one line, with a non-zero exit, on settings the API server or the pods would
reject (quantities, locations no pod can read, train arguments `shardtrain train` refuses,
image tags), instead of printing a manifest that fails later."""

from __future__ import annotations

import pytest

from helpers import cli_exit_code

DATA, MODEL_DIR = "s3://data/quest", "s3://data/models/quest"

REFUSED = {
    "memory-not-a-quantity": (("--memory", "lots"), "memory 'lots' is not a Kubernetes quantity"),
    "memory-negative": (("--memory", "-1Gi"), "memory '-1Gi' must be a positive quantity"),
    "cpu-negative": (("--cpu", "-2"), "cpu '-2' must be a positive quantity"),
    "cpu-zero": (("--cpu", "0"), "cpu '0' must be a positive quantity"),
    "data-not-a-uri": (("--data", "not a uri"), "--data 'not a uri' is a local path"),
    "data-local": (("--data", "/tmp/quest"), "--data '/tmp/quest' is a local path"),
    "model-dir-local": (("--model-dir", "file:///m"), "--model-dir 'file:///m' is a local path"),
    "data-unknown-scheme": (("--data", "http://h/q"), "unsupported URI scheme 'http://'"),
    "unknown-train-flag": (
        ("--", "--no-such-flag", "1"),
        "train args (after --): No such option '--no-such-flag'",
    ),
    "train-steps-out-of-range": (
        ("--", "--train-steps", "-5"),
        "train args (after --): Invalid value for '--train-steps': -5 is not in the range x>=1",
    ),
    "train-help": (("--", "--help"), "train args (after --): No such option '--help'"),
}


def _render(kind: str, args: tuple[str, ...]) -> int:
    given = dict(zip(args[::2], args[1::2], strict=False))
    base = []
    if "--data" not in given:
        base += ["--data", DATA]
    if "--model-dir" not in given:
        base += ["--model-dir", MODEL_DIR]
    return cli_exit_code(kind, "render", *base, *args)


@pytest.mark.parametrize("kind", ["tfjob", "trainjob"])
@pytest.mark.parametrize("case", sorted(REFUSED))
def test_a_render_refuses_what_a_pod_would_refuse(kind, case, capsys):
    args, message = REFUSED[case]
    assert _render(kind, args) == 1
    out = capsys.readouterr()
    assert out.out == ""  # no manifest
    (line,) = out.err.strip().splitlines()
    assert line.startswith("error: ") and message in line, line


@pytest.mark.parametrize("kind", ["tfjob", "trainjob"])
def test_valid_train_arguments_still_render(kind, capsys):
    args = ("--", "--train-steps", "5", "--dropout", "0.1", "--extra", "a=1")
    assert _render(kind, args) == 0
    assert "--dropout" in capsys.readouterr().out


@pytest.mark.parametrize("version", ["x y", "-gpu", "2.6.2:latest", "a" * 129])
def test_serve_render_refuses_a_runtime_version_that_is_no_image_tag(version, capsys):
    code = cli_exit_code(
        "serve", "render", "--serving-uri", "s3://b/serving", "--no-check",
        "--runtime-version", version,
    )  # fmt: skip
    assert code == 1
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert f"runtime_version '{version}' is not an image tag" in line


def test_serve_render_takes_a_tensorflow_serving_tag(capsys):
    code = cli_exit_code(
        "serve", "render", "--serving-uri", "s3://b/serving", "--no-check",
        "--runtime-version", "2.19.0",
    )  # fmt: skip
    assert code == 0
    assert "runtimeVersion: 2.19.0" in capsys.readouterr().out
