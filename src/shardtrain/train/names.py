"""TensorFlow-safe names for columns whose own names TensorFlow refuses.

A column may be called anything a CSV header, a Parquet schema or a JSON key can hold:
``Delta 15 N (o/oo)``, ``クエスト種別``, ``1st``, ``class``, ``a b`` next to ``a_b`` and ``A b``.
The features dict the trainer, the evaluator and the exported model pass around is keyed
by those names, unchanged. Only where TensorFlow or Keras needs a *name* of its own — a
Keras layer (a TF name scope: ASCII ``[A-Za-z0-9_.-]``, no ``/`` in Keras 3), a SavedModel
signature input (a Python identifier, ASCII, not a keyword, not ``self``) — each column
gets its **input name** from :func:`input_names`:

* a name that is already valid for both, ``[A-Za-z][A-Za-z0-9_]*`` and not a Python keyword
  or ``self``, is kept as it is (``player_level``, ``a_b``), unless another column's name
  is the same but for case (``Ab`` and ``ab``: a SavedModel names its inputs' placeholders
  in lower case, so signature inputs must differ in more than case);
* any other name becomes its ASCII letters and digits, runs of anything else replaced by
  ``_`` (at most 40 characters; ``col_`` in front when that does not start with a letter),
  then ``_`` and the first 8 hex digits of the SHA-256 of the name's UTF-8 bytes:
  ``Delta 15 N (o/oo)`` → ``Delta_15_N_o_oo_<8 hex>``, ``クエスト種別`` → ``col_<8 hex>``,
  ``1st`` → ``col_1st_<8 hex>``;
* should a derived name meet a name already taken, ignoring case (another column's own
  name), its hash grows to 16, then 64 hex digits.

The result depends only on the names, so every replica, a restart and the export agree;
the mapping is written beside the export (``shardtrain_model.json``) and shown by
``shardtrain inspect``. This module imports nothing heavy (no TensorFlow).
"""

from __future__ import annotations

import hashlib
import keyword
import re
from collections import Counter
from collections.abc import Iterable

#: What a name must look like to be kept: a SavedModel signature input (TensorFlow turns
#: anything else into ``[A-Za-z0-9_]`` itself, so ``p.q`` and ``p_q`` would meet) and a
#: valid Keras layer and TF name scope.
_VALID = re.compile(r"[A-Za-z][A-Za-z0-9_]*")
#: Identifiers a signature cannot take as an argument name (``inspect.Parameter`` refuses
#: keywords; ``self`` is the signature function's own first argument).
_REFUSED = frozenset(keyword.kwlist) | {"self"}
#: Longest readable part kept from a name that must be derived.
_MAX_STEM = 40
#: Hex digits of the hash: first try, then on a collision.
_HASH_DIGITS = (8, 16, 64)


def is_valid_input_name(name: str) -> bool:
    """True when TensorFlow and Keras take ``name`` as it is (it is kept unchanged)."""
    return bool(_VALID.fullmatch(name)) and name not in _REFUSED


def derived_name(name: str, digits: int = 8) -> str:
    """The derived input name of ``name`` (whether or not it needs one), ``digits`` hex
    digits of hash: ``derived_name("Delta 15 N (o/oo)")`` → ``'Delta_15_N_o_oo_<8 hex>'``."""
    stem = re.sub(r"[^A-Za-z0-9]+", "_", name).strip("_")[:_MAX_STEM].rstrip("_")
    if not stem[:1].isalpha():
        stem = f"col_{stem}" if stem else "col"
    return f"{stem}_{hashlib.sha256(name.encode('utf-8')).hexdigest()[:digits]}"


def input_names(names: Iterable[str]) -> dict[str, str]:
    """``{column name: input name}`` for ``names``: unique, valid, stable (see the module).

    Args:
        names: distinct column names, in any order (the result does not depend on it).
    """
    names = list(dict.fromkeys(names))
    folded = Counter(n.lower() for n in names if is_valid_input_name(n))
    out = {n: n for n in names if is_valid_input_name(n) and folded[n.lower()] == 1}
    taken = {n.lower() for n in out}
    for name in sorted(n for n in names if n not in out):
        for digits in _HASH_DIGITS:
            candidate = derived_name(name, digits)
            if candidate.lower() not in taken:
                break
        else:  # pragma: no cover - a SHA-256 collision
            raise ValueError(f"no unique input name for column {name!r}")
        out[name] = candidate
        taken.add(candidate.lower())
    return {n: out[n] for n in names}


def unique_layer_name(base: str, taken: set[str]) -> str:
    """``base``, or ``base_1``, ``base_2``... the first not in ``taken`` (which it joins).

    A model's own layers (``logits``, ``hidden_0``...) must not share a name with an input
    layer: a column may well be called ``logits``.
    """
    name, i = base, 0
    while name in taken:
        i += 1
        name = f"{base}_{i}"
    taken.add(name)
    return name
