"""shardtrain: train TensorFlow models on data far larger than memory on Kubeflow.

The library behind the ``shardtrain`` CLI, the Kubeflow pipeline components and the TFJob
trainer. Modules are named by role:

* :mod:`shardtrain.storage` — one storage layer over local paths, ``s3://`` (MinIO) and ``gs://``.
* :mod:`shardtrain.errors` — user-facing errors and exit codes.
"""

# The one place the version is written (pyproject.toml reads it from here): a literal, because
# importlib.metadata would add noticeable imports to every start of the CLI.
__version__ = "0.1.0"

__all__ = ["__version__"]
