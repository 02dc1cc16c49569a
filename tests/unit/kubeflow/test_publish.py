"""Publishing at the serving location: latest.json names what TF Serving serves (the highest
committed version), whatever order overlapping runs publish in, and a candidate blessed
against a served model that changed since is not published."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from shardtrain import storage
from shardtrain.errors import NotCommittedError, StaleDecisionError
from shardtrain.kubeflow.publish import check_still_served, publish_export


def _export(root: Path, version: str) -> str:
    """A model directory's export (fake SavedModel files)."""
    uri = str(root / f"model-{version}" / "export" / version)
    storage.write_bytes(f"{uri}/variables/variables.index", b"index")
    storage.write_bytes(f"{uri}/saved_model.pb", b"graph")
    return uri


def _latest(serving: str) -> dict:
    return storage.read_json(f"{serving}/latest.json")


def test_the_pointer_never_moves_below_the_highest_committed_version(tmp_path, caplog):
    """Two overlapping runs: the later version publishes first; the earlier one's version is
    copied and committed, but latest.json keeps naming the version TF Serving serves."""
    serving = str(tmp_path / "serving")
    newer, older = _export(tmp_path, "200"), _export(tmp_path, "100")
    publish_export(newer, serving, step=20)
    with caplog.at_level(logging.WARNING, logger="shardtrain.kubeflow.publish"):
        assert publish_export(older, serving, step=10) == f"{serving}/100"
    assert storage.is_committed(f"{serving}/100")
    assert _latest(serving) == {"version": "200", "path": "200", "step": 20, "source": newer}
    # (Warnings only: an earlier test may have left this logger at INFO, and the first
    # publication's INFO line is then captured too.)
    said = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert said == [
        f"{serving}/latest.json stays at version 200, not 100: it is higher, and TF Serving "
        "serves the highest version"
    ]
    # A pointer left below the highest committed version is moved up by the next publication.
    storage.write_json(f"{serving}/latest.json", {"version": "100", "path": "100"})
    publish_export(older, serving, step=10)
    assert _latest(serving)["version"] == "200"


def test_a_version_published_before_a_crash_gets_its_pointer(tmp_path):
    """The version's manifest was written, the pointer not (a crash between them): publishing
    again copies nothing and writes the pointer."""
    serving = str(tmp_path / "serving")
    export = _export(tmp_path, "100")
    publish_export(export, serving, step=10)
    storage.delete(f"{serving}/latest.json")
    assert publish_export(export, serving, step=10) == f"{serving}/100"
    assert _latest(serving) == {"version": "100", "path": "100", "step": 10, "source": export}


def _bless(model_dir: str, export: str, baseline: dict | None, blessed: bool = True) -> None:
    storage.write_json(
        f"{model_dir}/eval/blessing.json",
        {
            "blessed": blessed,
            "summary": "blessed: 1 threshold(s) hold" if blessed else "not blessed: auc ...",
            "candidate": {"export": export, "metrics": {}},
            "baseline": baseline,
        },
    )


def test_a_candidate_blessed_against_a_model_no_longer_served_is_refused(tmp_path):
    serving = str(tmp_path / "serving")
    first = _export(tmp_path, "100")
    candidate = _export(tmp_path, "300")
    model_dir = str(Path(candidate).parent.parent)
    with pytest.raises(NotCommittedError, match=r"blessing.json: missing; evaluate the model "):
        check_still_served(model_dir, serving, candidate)

    # Blessed when nothing was served; another run has published since.
    _bless(model_dir, candidate, None)
    check_still_served(model_dir, serving, candidate)
    publish_export(first, serving, step=10)
    with pytest.raises(StaleDecisionError) as info:
        check_still_served(model_dir, serving, candidate)
    assert str(info.value) == (
        f"{serving} serves version 100, not nothing that {candidate} was blessed against "
        "(another run published since): not publishing; evaluate again"
    )

    # Blessed against version 100, still served: fine; then 200 is published.
    baseline = {"uri": f"{serving}/100", "version": "100", "step": 10, "source": first}
    _bless(model_dir, candidate, baseline)
    check_still_served(model_dir, serving, candidate)
    publish_export(_export(tmp_path, "200"), serving, step=20)
    with pytest.raises(StaleDecisionError, match=r"serves version 200, not version 100 that "):
        check_still_served(model_dir, serving, candidate)

    # Already published (a re-run of the export step): fine whatever the blessing's baseline.
    publish_export(candidate, serving, step=30)
    check_still_served(model_dir, serving, candidate)

    _bless(model_dir, candidate, baseline, blessed=False)
    with pytest.raises(StaleDecisionError, match=r"blessing.json: not blessed \(not blessed: "):
        check_still_served(model_dir, serving, candidate)
    _bless(model_dir, first, baseline)
    with pytest.raises(StaleDecisionError, match=rf"blessed {first}, not the newest export "):
        check_still_served(model_dir, serving, candidate)
