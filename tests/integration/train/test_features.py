"""Date and timestamp columns read as time, in TensorFlow, against Python's datetime."""

from __future__ import annotations

import datetime as dt
import math
import random

import numpy as np
import pytest

from shardtrain.train.dates import time_parts

FORMS = [
    "%Y-%m-%d",
    "%Y-%m-%dT%H:%M:%S",
    "%Y-%m-%d %H:%M",
    "%Y-%m-%dT%H:%M:%SZ",
    "%Y-%m-%dT%H:%M:%S.250+09:00",
]


def test_time_parts_match_python_datetime():
    import tensorflow as tf

    rng = random.Random(0)
    stamps = [
        dt.datetime(1900, 1, 1) + dt.timedelta(seconds=rng.randint(0, 200 * 365 * 86400))
        for _ in range(400)
    ]
    stamps.append(dt.datetime(2024, 2, 29, 23, 59, 59))
    texts = [s.strftime(rng.choice(FORMS)) for s in stamps]
    mean, std = 1.2e9, 3.0e8
    seconds, dow_sin, dow_cos, hour_sin, hour_cos = (
        t.numpy() for t in time_parts(tf.constant(texts), mean=mean, std=std, with_time=True)
    )
    for i, text in enumerate(texts):
        written = dt.datetime.strptime(text[:19], "%Y-%m-%dT%H:%M:%S") if len(text) >= 19 else None
        if len(text) == 10:
            written = dt.datetime.strptime(text, "%Y-%m-%d")
        elif len(text) == 16:
            written = dt.datetime.strptime(text, "%Y-%m-%d %H:%M")
        assert written is not None
        epoch = (written - dt.datetime(1970, 1, 1)).total_seconds()
        assert seconds[i] == pytest.approx((epoch - mean) / std, rel=1e-6, abs=2e-6), text
        day = written.weekday()
        assert dow_sin[i] == pytest.approx(math.sin(2 * math.pi * day / 7), abs=1e-5)
        assert dow_cos[i] == pytest.approx(math.cos(2 * math.pi * day / 7), abs=1e-5)
        hour = written.hour + written.minute / 60
        assert hour_sin[i] == pytest.approx(math.sin(2 * math.pi * hour / 24), abs=1e-5)
        assert hour_cos[i] == pytest.approx(math.cos(2 * math.pi * hour / 24), abs=1e-5)


def test_what_is_not_a_date_is_missing():
    import tensorflow as tf

    texts = ["", "garbage", "2020-13-01", "2020-01-01T25:00", "N1A1", "2020-01-01"]
    parts = time_parts(tf.constant(texts), mean=0.0, std=1.0, with_time=False)
    assert len(parts) == 3
    seconds = parts[0].numpy()
    assert np.isnan(seconds[:5]).all() and np.isfinite(seconds[5])
