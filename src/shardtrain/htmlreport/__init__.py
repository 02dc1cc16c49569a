"""The HTML report: the data, its drift from the served model's data, and the model, as pictures.

One self-contained HTML file (inline SVG drawn by matplotlib, a little inline script, nothing
fetched) for a sharded dataset, and optionally a model directory trained on it and the served
model it may replace::

    from shardtrain.htmlreport import write_report
    write_report("s3://bucket/quest", model_dir="s3://bucket/model",
                 against="s3://bucket/serving", output="report.html")

``shardtrain report`` makes one for any dataset or model; ``shardtrain evaluate`` writes one
to ``MODEL_DIR/eval/report.html``; the pipeline's evaluate step outputs it as a ``dsl.HTML``
artifact, which the Kubeflow Pipelines UI shows in place.

Modules by role: :mod:`.inputs` reads what is shown (:mod:`.history` the TensorBoard
summaries, :mod:`.sample` per-example scores of the eval split), :mod:`.charts` draws each
chart, :mod:`.page` lays out the page, :mod:`.build` ties them together.
"""

from shardtrain.htmlreport.build import REPORT_NAME, write_report

__all__ = ["REPORT_NAME", "write_report"]
