"""Sources: how raw inputs are listed, sampled, split into pieces and read as typed batches.

The sharder sees sources only through the shared types here; each kind of input (:mod:`.csv`,
:mod:`.images`) supplies its reader.
"""
