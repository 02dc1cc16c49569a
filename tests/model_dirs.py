"""What the evaluate step and the report read, made small: a trainer's eval metrics, an export
version and a tiny sharded quest dataset (shared by the step, report and page tests)."""

from __future__ import annotations

from pathlib import Path

#: ``MODEL_DIR/eval/metrics.json`` of a binary classifier, as the evaluator writes it.
EVAL_METRICS = {
    "auc": 0.84,
    "accuracy": 0.77,
    "log_loss": 0.48,
    "num_examples": 40,
    "step": 300,
    "confusion_matrix": {"labels": ["0", "1"], "matrix": [[15, 5], [4, 16]]},
    "roc": {"fpr": [0.0, 0.25, 1.0], "tpr": [0.0, 0.8, 1.0], "thresholds": [1.0, 0.5, 0.0]},
}
#: The version folder of a fake export (``MODEL_DIR/export/<version>``).
EXPORT_VERSION = "1700000000"


def tiny_quest_dataset(base: Path) -> str:
    """400 quest-log rows (1% junk) sharded into ``base/ds`` in one process; its URI."""
    from shardtrain.data import datagen, sharding

    csv = str(base / "quest.csv")
    datagen.generate_quest_logs(csv, 400, seed=3, bad_fraction=0.01)
    out = str(base / "ds")
    sharding.shard(
        sharding.ShardConfig(
            sources=(csv,),
            output=out,
            label="cleared",
            key="attempt_id",
            processes=1,
            max_bad_fraction=0.05,
        )
    )
    return out
