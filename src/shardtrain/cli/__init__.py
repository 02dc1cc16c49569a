"""The ``shardtrain`` command line: a thin layer that parses arguments and calls the library.

Every command translates its options into one library call; no logic lives here. User
mistakes surface as :class:`~shardtrain.errors.ShardtrainError` and are printed as one line on
stderr with the error's exit code (see :mod:`shardtrain.errors`), never as a traceback. Set
``SHARDTRAIN_DEBUG=1`` to see the traceback anyway.

This package holds the root group :func:`cli` and the entry point :func:`main` (the console
script ``shardtrain`` and ``python -m shardtrain.cli``); the commands live in one module per
subject and are attached to the root group here:

* :mod:`.data`: ``gen-data quest|images``, ``shard``, ``settle``, ``finalize``, ``inspect``,
  ``warm-up``, ``validate``;
* :mod:`.train`: ``train``, ``evaluate``, ``run-local``;
* :mod:`.report`: ``report`` (the HTML report of a dataset and a model);
* :mod:`.trainjob`: ``trainjob render|submit`` (Kubeflow Trainer v2);
* :mod:`.jobs`: ``tfjob render|submit`` (the training operator v1);
* :mod:`.serve`: ``serve render`` (a KServe InferenceService of a published model);
* :mod:`.pipeline`: ``pipeline params|compile|submit|run-local``, ``demo``.

Start-up is paid by every command, and by every TFJob replica (each runs ``shardtrain
train``), so importing the CLI loads click and the command definitions only: each command
imports the library it calls when it runs. TensorFlow, pandas, pyarrow, kfp and even PyYAML
stay out of ``shardtrain --help`` and out of the commands that do not use them.
"""

from __future__ import annotations

import gc
import os
import sys

import click

from shardtrain import __version__
from shardtrain.cli import data, jobs, pipeline, report, serve, train, trainjob
from shardtrain.errors import ShardingStopped, ShardtrainError


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="shardtrain")
@click.option("-v", "--verbose", is_flag=True, help="Log debug details.")
def cli(verbose: bool) -> None:
    """Shard data far larger than memory into TFRecords in object storage and train
    TensorFlow models on it with tf.distribute on Kubeflow."""
    from shardtrain.progress import setup_logging

    setup_logging(verbose)


cli.add_command(data.gen_data)
cli.add_command(data.shard_cmd)
cli.add_command(data.settle_cmd)
cli.add_command(data.finalize_cmd)
cli.add_command(data.inspect_cmd)
cli.add_command(data.warm_up_cmd)
cli.add_command(data.validate_cmd)
cli.add_command(train.train_cmd)
cli.add_command(train.evaluate_cmd)
cli.add_command(train.run_local_cmd)
cli.add_command(report.report_cmd)
cli.add_command(trainjob.trainjob_group)
cli.add_command(jobs.tfjob_group)
cli.add_command(serve.serve_group)
cli.add_command(pipeline.pipeline_group)
cli.add_command(pipeline.demo_cmd)


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point: user errors become one line on stderr and an exit code."""
    try:
        cli.main(args=argv, prog_name="shardtrain", standalone_mode=True)
    except (ShardtrainError, ShardingStopped) as exc:
        if os.environ.get("SHARDTRAIN_DEBUG"):
            raise
        click.secho(f"error: {exc}", err=True, fg="red")
        if argv is None and exc.exit_code >= 128:
            _exit_now(exc.exit_code)
        sys.exit(exc.exit_code)
    finally:
        if argv is None:
            # The console script: the process ends here. Spare the interpreter's last cyclic
            # collection over every object of numba, Arrow (and TensorFlow) -- 0.3 s after a
            # sharding run, 0.7 s with TensorFlow loaded; the memory goes back to the OS with
            # the process anyway. (Callers that pass ``argv`` carry on: nothing is frozen.)
            gc.freeze()


def _exit_now(code: int) -> None:
    """End a retryable replica (interrupted, or its peer lost) without the runtime's teardown.

    Its checkpoint is published and its output flushed; what is left is TensorFlow's
    shutdown, which after a lost peer waits on a coordination service whose members are
    gone (and a pod being replaced has no time to wait). ``os._exit`` skips it.
    """
    import logging

    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
