"""Data preparation: raw CSV/images → TFRecord shards plus ``metadata.json``.

:mod:`.sources` read raw inputs (CSV, images) in bounded blocks, :mod:`.schema` and
:mod:`.statistics` describe them, :mod:`.sharding` splits, encodes and writes shards with
crash-safe resume, and :mod:`.report` summarises a finished dataset. :mod:`.validation`
checks a dataset against another or against a model's training data (:mod:`.profile`), by
schema and by distribution (:mod:`.histogram`, :mod:`.drift`). :mod:`.datagen` makes
synthetic quest logs and images for demos, tests and benchmarks.
"""
