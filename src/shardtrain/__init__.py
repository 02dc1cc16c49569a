"""shardtrain: train TensorFlow models on data far larger than memory on Kubeflow.

The library behind the ``shardtrain`` CLI, the Kubeflow pipeline components and the TFJob
trainer. Modules are named by role:

* :mod:`shardtrain.storage` — one storage layer over local paths, ``s3://`` (MinIO) and ``gs://``.
* :mod:`shardtrain.errors` — user-facing errors and exit codes.
"""

from importlib import metadata as _metadata

try:
    __version__ = _metadata.version("shardtrain")
except _metadata.PackageNotFoundError:  # running from a source tree without install
    __version__ = "0.0.0+source"

__all__ = ["__version__"]
