"""``tf.train.Example`` without TensorFlow, for the fast test tier.

The message types are declared here from ``tensorflow/core/example/{example,feature}.proto``
and parsed by the protobuf runtime itself (not by shardtrain's code), so reading shards back in
unit tests is an independent check of the encoder. The integration tier compares the same
bytes with TensorFlow's own parser and writer.
"""

from __future__ import annotations

import gzip
from collections.abc import Iterator
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from shardtrain.kernels.tfrecord import read_tfrecords

_F = descriptor_pb2.FieldDescriptorProto


def _message_classes() -> dict[str, Any]:
    proto = descriptor_pb2.FileDescriptorProto(
        name="shardtrain_tests/example.proto", package="shardtrain_tests", syntax="proto3"
    )

    def message(
        name: str, *fields: tuple[str, int, int, int, str]
    ) -> descriptor_pb2.DescriptorProto:
        m = proto.message_type.add(name=name)
        for field_name, number, kind, label, type_name in fields:
            f = m.field.add(name=field_name, number=number, type=kind, label=label)
            if type_name:
                f.type_name = type_name
        return m

    rep, opt = _F.LABEL_REPEATED, _F.LABEL_OPTIONAL
    message("BytesList", ("value", 1, _F.TYPE_BYTES, rep, ""))
    floats = message("FloatList", ("value", 1, _F.TYPE_FLOAT, rep, ""))
    floats.field[0].options.packed = True
    ints = message("Int64List", ("value", 1, _F.TYPE_INT64, rep, ""))
    ints.field[0].options.packed = True
    feature = message(
        "Feature",
        ("bytes_list", 1, _F.TYPE_MESSAGE, opt, ".shardtrain_tests.BytesList"),
        ("float_list", 2, _F.TYPE_MESSAGE, opt, ".shardtrain_tests.FloatList"),
        ("int64_list", 3, _F.TYPE_MESSAGE, opt, ".shardtrain_tests.Int64List"),
    )
    feature.oneof_decl.add(name="kind")
    for f in feature.field:
        f.oneof_index = 0
    features = message(
        "Features",
        ("feature", 1, _F.TYPE_MESSAGE, rep, ".shardtrain_tests.Features.FeatureEntry"),
    )
    entry = features.nested_type.add(name="FeatureEntry")
    entry.options.map_entry = True
    entry.field.add(name="key", number=1, type=_F.TYPE_STRING, label=opt)
    entry.field.add(
        name="value", number=2, type=_F.TYPE_MESSAGE, label=opt,
        type_name=".shardtrain_tests.Feature",
    )  # fmt: skip
    message("Example", ("features", 1, _F.TYPE_MESSAGE, opt, ".shardtrain_tests.Features"))
    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto)
    return {
        name: message_factory.GetMessageClass(
            pool.FindMessageTypeByName(f"shardtrain_tests.{name}")
        )
        for name in ("Example", "Features")
    }


_CLASSES = _message_classes()
#: The message classes, as ``tf.train`` has them (enough for building Examples in tests).
Example, Features = _CLASSES["Example"], _CLASSES["Features"]


def parse_example(record: bytes) -> dict[str, list]:
    """One serialized Example as ``{feature: [values]}`` (bytes, floats or ints)."""
    example = Example.FromString(record)
    out = {}
    for key, feature in example.features.feature.items():
        kind = feature.WhichOneof("kind")
        out[key] = list(getattr(feature, kind).value) if kind else []
    return out


def iter_records(path: str, compressed: bool) -> Iterator[bytes]:
    """The records of a local TFRecord file (gzip or not), CRCs checked."""
    opener = gzip.open if compressed else open
    with opener(path, "rb") as f:
        yield from read_tfrecords(f)
