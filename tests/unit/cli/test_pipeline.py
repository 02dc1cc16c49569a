"""``shardtrain pipeline compile``: the YAML, with new defaults given on the command line."""

from __future__ import annotations

import yaml

from helpers import run_cli, run_cli_here


def test_cli_compile_writes_the_yaml_with_new_defaults(tmp_path):
    out = tmp_path / "p.yaml"
    proc = run_cli_here(
        "pipeline", "compile", "-o", str(out), "-p", "image=registry.example/st:9", "-p",
        "tfjob_workers=3",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    spec = next(yaml.safe_load_all(out.read_text()))
    params = spec["root"]["inputDefinitions"]["parameters"]
    assert params["image"]["defaultValue"] == "registry.example/st:9"
    assert params["tfjob_workers"]["defaultValue"] == 3
    bad = run_cli("pipeline", "compile", "-o", str(out), "-p", "gpus=2")
    assert bad.returncode == 1
    assert bad.stderr.strip().splitlines()[-1].startswith("error: unknown pipeline parameter")
