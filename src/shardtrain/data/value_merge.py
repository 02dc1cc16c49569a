"""Value counts merged in plain Python: :class:`~shardtrain.kernels.value_counts.ValueCounts`'s
table and its limits, for a process that only merges a few lists of counts.

Counting a block's values takes the compiled table; merging the vocabularies of a run's
worker summaries (a few thousand values each) does not, and the first call of any compiled
kernel costs a process about 0.3 s of numba start-up -- a third of what the pipeline's settle
step costs otherwise. :class:`ValueMerge` keeps the same entries in a dict instead, under the
same rules, so that it ends with the same table, entry for entry:

* a value not yet counted when ``max_values`` are tracked first prunes the table to its
  ``max_values // 2`` most frequent values;
* a value whose bytes (UTF-8) would take the values tracked beyond ``max_bytes`` first prunes
  it to half its size, again until they fit (or nothing is left);
* pruning keeps the most frequent values, ties at the cut by the order they came in, and keeps
  that order (:meth:`ValueCounts._prune <shardtrain.kernels.value_counts.ValueCounts>`).

A test holds the two to the same tables on random inputs that prune both ways.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa

from shardtrain.kernels import arrow

__all__ = ["ValueMerge"]


class ValueMerge:
    """Exact counts of distinct strings, bounded as :class:`ValueCounts` bounds them.

    Attributes:
        pruned: whether values were dropped to stay within the limits.
    """

    def __init__(self, max_values: int, max_bytes: int) -> None:
        self.max_values = max(max_values, 1)
        self.max_bytes = max_bytes
        self.pruned = False
        self._counts: dict[str, int] = {}
        self._bytes = 0  # UTF-8 bytes of the values tracked

    @property
    def size(self) -> int:
        """The distinct values tracked."""
        return len(self._counts)

    def add_lists(self, values: Sequence[str], counts: Sequence[int]) -> None:
        """Count ``values[i]`` ``counts[i]`` times, in order."""
        table = self._counts
        for value, count in zip(values, counts, strict=True):
            if value in table:
                table[value] += count
                continue
            length = len(value.encode())
            if len(table) >= self.max_values:
                table = self._prune(self.max_values // 2)
            while self._bytes + length > self.max_bytes and table:
                table = self._prune(len(table) // 2)
            table[value] = count
            self._bytes += length

    def table(self) -> pa.Table:
        """``value`` (large_string) and ``count`` of every entry, in entry order."""
        return pa.table(
            {
                "value": arrow.strings(self._counts, pa.large_string()),
                "count": arrow.from_numpy(np.fromiter(self._counts.values(), dtype=np.int64)),
            }
        )

    def _prune(self, keep: int) -> dict[str, int]:
        """Keep the ``keep`` most frequent values (ties at the cut: the first ones); returns
        the new table."""
        self.pruned = True
        keep = max(0, min(keep, len(self._counts)))
        kept: dict[str, int] = {}
        if keep:
            counts = np.fromiter(self._counts.values(), dtype=np.int64, count=len(self._counts))
            cut = int(np.partition(counts, counts.size - keep)[counts.size - keep])
            ties = keep - int(np.count_nonzero(counts > cut))
            for value, count in self._counts.items():
                if count > cut:
                    kept[value] = count
                elif count == cut and ties > 0:
                    kept[value] = count
                    ties -= 1
        self._counts = kept
        self._bytes = sum(len(v.encode()) for v in kept)
        return kept
