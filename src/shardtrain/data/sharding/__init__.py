"""The sharder: CSV, Parquet, JSON lines or images far larger than memory → TFRecord shards of
``tf.train.Example`` in storage.

Layout of a sharded dataset at ``URI``::

    URI/metadata.json                                  written last: the commit marker
    URI/<split>/part-00000-of-00016.tfrecord           columnar blocks of up to 256 rows
                                                       (tabular data by default), or
    URI/<split>/part-00000-of-00016.tfrecord.gz        one tf.train.Example per row
                                                       (images; --record-format example)
    URI/rejects/rejects.jsonl                          every rejected row: file, line, reason
    URI/_plan.json, URI/_tasks/...                     bookkeeping for resume and scale-out

How a run works
---------------
1. **Plan** (:mod:`.plan`; deterministic, identical on every worker): the run's source
   (:meth:`ShardConfig.source`) lists its inputs with their sizes and version tags and settles
   the schema (for CSV: inferred from a sample of the first file, or from a schema file); the
   plan estimates the output size, chooses the number of shards per split (``--num-shards``, or
   ~``target_shard_bytes`` each and never fewer than ``min_shards``), and cut the input into
   *tasks*: runs of byte-range pieces of about ``task_bytes``. Each task owns a fixed range of
   shard indices of every split, so the layout does not depend on how many workers run.
2. **Tasks** (:mod:`.run`, :mod:`.task`, :mod:`.writer`, :mod:`.pool`): worker ``i`` of ``n``
   runs the tasks ``t`` with ``t % n == i`` (each in ``processes`` local processes). A task
   streams its pieces in blocks through the source, which parses and validates rows
   column-wise (:mod:`shardtrain.data.sources.csv`) and hashes each row's key — or the whole row —
   with xxHash64 to choose its split (the same row lands in the same split on every run, on
   every machine, with any number of workers) and a shard inside the task's range, encodes
   Examples and TFRecord frames in compiled code (:mod:`shardtrain.kernels.example_encode`)
   and streams them to its shard objects from a writer thread (gzip level 1 through ISA-L;
   local files with ``O_DIRECT``, see :func:`shardtrain.storage.open`). It then writes its
   manifest ``_tasks/task-NNNNN.json`` with counts, checksums and partial statistics — the
   task's commit. A worker whose tasks have all committed writes a summary of them
   (:mod:`.summary`): what settling and finalizing read, one file per worker. The extra local
   processes are forked from the parent once it has loaded the compiled kernels and the
   object store's client library, before its first storage call
   (:meth:`~.pool.WorkerPool.before_storage`), so they start with nothing to import or load.
   SIGTERM stops a run with its lease released (:mod:`.signals`).
3. **Settle** (:mod:`.settle`; ``shardtrain settle``, automatic with one worker): decide what
   planning guessed and the tasks checked as they read (CSV types by all rows), and run the
   tasks a wrong guess spoiled again. Planning itself reads only the listing and a sample.
4. **Finalize** (:mod:`.finalize`; ``shardtrain finalize URI``, automatic with one worker):
   check that every task committed, merge statistics, write ``rejects/rejects.jsonl`` with
   file line numbers, enforce ``max_bad_fraction``, and publish ``metadata.json``.

A run's options are one :class:`ShardConfig` (:mod:`shardtrain.data.shard_config`, re-exported
here): every field is a ``shardtrain shard`` flag and a pipeline parameter.

The sharder sees its input only through the :class:`~shardtrain.data.sources.base.Source`
interface: image datasets (a directory tree ``ROOT/<class>/*.jpg`` or a manifest of image
paths, :mod:`shardtrain.data.sources.images`), Parquet files (row groups,
:mod:`shardtrain.data.sources.parquet`) and JSON lines (:mod:`shardtrain.data.sources.jsonl`) go
through the same plan, tasks, shards, rejects and finalize as CSV; the source only supplies the
plan's inputs and reads each piece into the same batches.

Crash safety: every shard object is atomic (see :mod:`shardtrain.storage`); a task commits by
writing its manifest after its shards; the dataset commits by writing ``metadata.json`` after
everything else. Re-running the same command after a crash (``kill -9`` at any point) skips
committed tasks and redoes the others from scratch, overwriting their shards, so every input row
ends up in exactly one shard exactly once. Re-running after success finds ``metadata.json`` and
does nothing. ``--overwrite`` shards afresh over whatever is there: a complete dataset (its
shards intact or not), a half-written one, a damaged one (a ``metadata.json`` or
``_plan.json`` that does not read, whose error names the field and the command that gets out).
"""

from shardtrain.data.shard_config import MIB, ShardConfig, parse_splits, validate_splits
from shardtrain.data.sharding.finalize import finalize
from shardtrain.data.sharding.plan import PLAN_NAME, Plan, Task, build_plan
from shardtrain.data.sharding.pool import tune_process_memory
from shardtrain.data.sharding.run import ShardOutcome, publish_plan, settle_and_redo, shard
from shardtrain.data.sharding.settle import Settlement, settle
from shardtrain.data.sharding.stored_layout import keep_stored_layout
from shardtrain.data.sharding.task import TaskResult, run_task

__all__ = [
    "MIB",
    "PLAN_NAME",
    "Plan",
    "Settlement",
    "ShardConfig",
    "ShardOutcome",
    "Task",
    "TaskResult",
    "build_plan",
    "finalize",
    "keep_stored_layout",
    "parse_splits",
    "publish_plan",
    "run_task",
    "settle",
    "settle_and_redo",
    "shard",
    "tune_process_memory",
    "validate_splits",
]
