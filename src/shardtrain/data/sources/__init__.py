"""Sources: how raw inputs are listed, sampled, split into pieces and read as typed batches.

The sharder sees sources only through the shared types here; each kind of input (:mod:`.csv`,
:mod:`.parquet`, :mod:`.jsonl`, :mod:`.images`) supplies its reader; :mod:`.typed` holds what
the Parquet and JSON-lines readers share (their types, split hashes, missing labels).
"""
