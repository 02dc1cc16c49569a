"""``shardtrain report``: the HTML report of a dataset, a model trained on it and its drift from
the served model's data (:mod:`shardtrain.htmlreport`)."""

from __future__ import annotations

import click


@click.command("report")
@click.argument("dataset")
@click.option(
    "--model-dir",
    default=None,
    help="A model directory trained on DATASET: its evaluation, training curve and scores.",
)
@click.option(
    "--against",
    default=None,
    metavar="SERVED",
    help="The served model (a serving location, SavedModel version or model directory), or "
    "a dataset: its training data's distributions are overlaid and the drift checked.",
)
@click.option(
    "--output",
    "-o",
    default=None,
    help="The HTML file to write (a path or URI). Default: MODEL_DIR/eval/report.html, "
    "or NAME-report.html here without --model-dir (NAME: the dataset's last path part).",
)
@click.option(
    "--sample-rows",
    type=click.IntRange(min=0),
    default=None,
    help="Eval rows scored for the calibration and residual plots (0: none; default 20,000).",
)
def report_cmd(
    dataset: str,
    model_dir: str | None,
    against: str | None,
    output: str | None,
    sample_rows: int | None,
) -> None:
    """Write a self-contained HTML report (inline SVG, nothing fetched) of DATASET: per
    column its distribution (beside the served model's training data and the drift verdict
    with --against), the label balance and the rejects; with --model-dir the training curve,
    ROC, precision-recall, confusion and calibration (a regression: predicted against actual
    and residuals) and the slices. Prints the file's path.

    Example: shardtrain report s3://b/quest --model-dir s3://b/model --against s3://b/serving
    """
    from shardtrain.htmlreport import write_report
    from shardtrain.htmlreport.sample import SAMPLE_ROWS

    path = write_report(
        dataset,
        model_dir=model_dir,
        against=against,
        output=output,
        sample_rows=SAMPLE_ROWS if sample_rows is None else sample_rows,
    )
    click.echo(path)
