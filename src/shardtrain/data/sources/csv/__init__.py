"""Reading CSV sources for the sharder: byte-range pieces, bounded blocks, typed batches, rejects.

The sharder (:mod:`shardtrain.data.sharding`) is source-agnostic; this package supplies its CSV
hook (:class:`~.source.CsvSource`), one module per job:

* :mod:`.listing` lists the files (with a content tag for local ones), reads the planning
  sample and opens text streams, transcoded to UTF-8 when the encoding is another.
* :mod:`.align`: :func:`~shardtrain.data.sources.base.plan_pieces` cuts plain CSV files into
  byte ranges so that many tasks (on one machine or many pods) read one large file in
  parallel (:func:`~.align.cut_pieces`: gzip files and files in an encoding that cannot be cut
  form one piece each; planning reads no data for it). A piece owns the records that begin in
  it and is read in blocks of whole records (:func:`~.align.iter_record_blocks`): from a
  start inside a file it guesses where its first record begins -- never inside a quoted
  field, which may hold line breaks -- with the quote state machine
  (:mod:`shardtrain.kernels.csv_records`), and the sharder checks the guesses once every
  piece is read (:mod:`shardtrain.data.sharding.alignment`).
* :mod:`.types` (``--infer-types all``, the default) types every column by all of its values
  from the counts of their kinds (:mod:`shardtrain.kernels.csv_types`), which the tasks make
  as they parse the data (planning takes the sample's types as a guess; the run's settle step
  decides, :mod:`shardtrain.data.sharding.settle`); the few values that are not numbers of a
  mostly numeric column are looked at again, to tell junk (the column stays numeric, their
  rows are rejected) from codes (the column is a string). Its :func:`~.types.type_pass`
  (the same counts by a pass of their own) types ``--skip-initial-space`` files at planning
  and is the tests' reference.
* :mod:`.parse`: :func:`~.parse.read_piece` streams one piece in blocks of about
  ``block_bytes`` (never the whole file), parses each block into typed columns
  (:func:`~.parse.parse_block`, by one of the paths of :mod:`.readers`; values read as text
  converted by :mod:`.convert`) and yields :class:`~shardtrain.data.sources.base.Batch` es:
  the accepted rows, a 64-bit hash per row for the split, and the rejected rows with their
  reason and line number. :mod:`.ranges` reports floats beyond float32's range.
* :mod:`.plan_options`: what a CSV run stores in its plan (the dialect, the
  all-rows types with the evidence and notes of the columns holding junk), as a typed record.

Blocks with ``,``, ``;``, tab or ``|`` between fields are parsed by a compiled kernel
(:mod:`shardtrain.kernels.csv_parse`) at about twice the speed of Arrow's CSV reader. In a
block that holds quotes, the kernel reads the records without a quote character and Arrow
the quoted ones, merged back in order (:func:`~.readers.read_mixed`; a block mostly quoted
goes to Arrow whole). Every other block -- other delimiters, an escape character,
``--skip-initial-space``, a bare carriage return, invalid UTF-8 -- is read by Arrow (with
line breaks in values), and what Arrow cannot map back to records by Python's csv module.
All give the same rows, values, rejects and line numbers; ``SHARDTRAIN_CSV_FAST=0`` turns
the kernel off, to compare or to rule it out. The dialect
(:class:`~shardtrain.data.csv_dialect.CsvDialect`) is stored in the plan, so every task reads
the same way.
Numbers with a decimal comma (``--decimal ,``, never with ``,`` between fields) are read by
Arrow (``decimal_point``), with the same correctly rounded float32 values as the point.

Rejected rows never vanish: a row with the wrong number of fields, a value that does not parse
as its column's type, or a missing label is reported with its line (the line its record starts
on, counted from the start of the piece; the sharder turns that into the file's line number)
and the raw text.

Null values are the same quoted or not (``""`` and ``"NA"`` are missing, as in pandas). See
the README's "CSV dialects, types, nulls" for the whole contract.
"""

from shardtrain.data.sources.csv.align import cut_pieces, iter_record_blocks
from shardtrain.data.sources.csv.listing import content_tag, list_sources, open_text, read_sample
from shardtrain.data.sources.csv.parse import parse_block, read_piece
from shardtrain.data.sources.csv.plan_options import CsvPlanOptions
from shardtrain.data.sources.csv.readers import FAST_PATH_ENV, fast_path_enabled
from shardtrain.data.sources.csv.source import CsvSource, plan_dialect
from shardtrain.data.sources.csv.types import (
    all_row_types,
    apply_all_row_types,
    infer_types_from_all_rows,
    type_pass,
    type_tally,
)

__all__ = [
    "FAST_PATH_ENV",
    "CsvPlanOptions",
    "CsvSource",
    "all_row_types",
    "apply_all_row_types",
    "content_tag",
    "cut_pieces",
    "fast_path_enabled",
    "infer_types_from_all_rows",
    "iter_record_blocks",
    "list_sources",
    "open_text",
    "parse_block",
    "plan_dialect",
    "read_piece",
    "read_sample",
    "type_pass",
    "type_tally",
]
