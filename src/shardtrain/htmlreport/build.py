"""Make the report and write it: :func:`write_report`."""

from __future__ import annotations

import logging
import time

from shardtrain import storage
from shardtrain.htmlreport.inputs import gather
from shardtrain.htmlreport.page import render_html
from shardtrain.htmlreport.sample import SAMPLE_ROWS

log = logging.getLogger(__name__)

#: The report's name beside a model's evaluation (``MODEL_DIR/eval/report.html``).
REPORT_NAME = "report.html"


def default_output(dataset_uri: str, model_dir: str | None) -> str:
    """Where a report goes when no output is named: ``MODEL_DIR/eval/report.html`` beside
    the evaluation, else ``<dataset's name>-report.html`` in the working directory (a
    committed dataset is left as it was written)."""
    if model_dir:
        return storage.join(model_dir, "eval", REPORT_NAME)
    return f"{storage.basename(dataset_uri.rstrip('/')) or 'dataset'}-{REPORT_NAME}"


def write_report(
    dataset_uri: str,
    *,
    model_dir: str | None = None,
    against: str | None = None,
    output: str | None = None,
    sample_rows: int = SAMPLE_ROWS,
) -> str:
    """Make the HTML report of ``dataset_uri`` (and ``model_dir``, against the served model
    ``against``) and write it to ``output`` (a path or URI; default: :func:`default_output`).

    Returns:
        Where it was written.

    Raises:
        NotCommittedError, DataError: ``dataset_uri`` is not a complete dataset.
        StorageError: ``output`` cannot be written.
    """
    start = time.perf_counter()
    text = make_report(dataset_uri, model_dir=model_dir, against=against, sample_rows=sample_rows)
    target = output or default_output(dataset_uri, model_dir)
    storage.write_text(target, text)
    log.info(
        "HTML report: %s (%.1f MB, %.1f s)",
        target,
        len(text.encode()) / 1e6,
        time.perf_counter() - start,
    )
    return target


def make_report(
    dataset_uri: str,
    *,
    model_dir: str | None = None,
    against: str | None = None,
    sample_rows: int = SAMPLE_ROWS,
) -> str:
    """The HTML text of the report (see :func:`write_report`)."""
    inputs = gather(dataset_uri, model_dir=model_dir, against=against, sample_rows=sample_rows)
    return render_html(inputs)


def try_write_report(
    dataset_uri: str,
    *,
    model_dir: str | None = None,
    against: str | None = None,
    output: str | None = None,
) -> str | None:
    """:func:`write_report` for a command whose real output is something else (the
    blessing): a report that cannot be made is one warning line, never that command's
    failure. Returns where it was written, or None."""
    from shardtrain.errors import one_line

    try:
        return write_report(dataset_uri, model_dir=model_dir, against=against, output=output)
    except Exception as exc:  # anything: the evaluation it illustrates stands without it
        log.warning("HTML report not written: %s", one_line(exc))
        return None
