# The shardtrain image: the CLI, the trainer (every TFJob replica), and the runtime of the
# Kubeflow pipeline's components. TensorFlow's GPU image, pinned by version (CUDA and cuDNN
# inside). The image keeps its base's Python, Ubuntu 22.04's python3.11 (reported as 3.11.0rc1
# for the 2.18 image in tensorflow/tensorflow#82529). The package supports 3.11-3.13; the check
# below asserts the 3.11 this tag ships, so a base bump that changes the Python is noticed.
# BASE_IMAGE replaces it where that image cannot be pulled: scripts/build-image builds on a
# Debian bookworm base of its own (Python 3.11, pip, useradd: what this file uses of the base).
ARG BASE_IMAGE=tensorflow/tensorflow:2.21.0-gpu
FROM ${BASE_IMAGE}

# The compiled kernels are compiled once, below (`shardtrain warm-up`), into site-packages. For
# a CPU baseline, not this build machine's CPU: x86-64-v2 (SSE4.2, POPCNT; every x86-64 server
# since 2009) with no extra features, so the cache is valid on every node. At run time uid 10001
# cannot write site-packages; shardtrain then copies the shipped cache to ~/.cache/numba on
# first use (src/shardtrain/kernels/cache.py). Jobs must keep these two settings.
ENV NUMBA_CPU_NAME=x86-64-v2 \
    NUMBA_CPU_FEATURES=""

# The package is installed the way CI installs it (`make env`): pip from the same range, then
# shardtrain with every dependency pinned by constraints.txt; here not editable and without
# the dev extras. kfp comes with it, so the components run without a `pip install` at start.
# In two layers, so that a change to src/ does not reinstall TensorFlow: first the dependencies
# alone, listed from pyproject.toml's [project] dependencies at build time (no second list to
# keep in step) and pinned by constraints.txt; this layer changes only with those two files.
WORKDIR /opt/shardtrain
COPY pyproject.toml constraints.txt ./
# KFP v2 materialises a step's artifacts under /gcs, /minio or /s3 (by the pipeline root's
# scheme); a non-root step must be able to create them (kubeflow/pipelines#10397).
RUN python3 -c 'import sys; assert sys.version_info[:2] == (3, 11), sys.version' \
    && python3 -m pip install --no-cache-dir "pip>=24,<27" \
    && python3 -c 'import tomllib; print(*tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"], sep="\n")' > /tmp/requirements.txt \
    && python3 -m pip install --no-cache-dir -c constraints.txt -r /tmp/requirements.txt \
    && rm /tmp/requirements.txt \
    && useradd --create-home --uid 10001 --shell /usr/sbin/nologin shardtrain \
    && mkdir -p /gcs /minio /s3 \
    && chown shardtrain /gcs /minio /s3

# Then shardtrain itself, without dependencies (all installed above: `pip check` fails the build
# if pyproject.toml asks for one that is missing), and its kernels compiled into its install.
# setuptools leaves its build folders in the source tree: not shipped.
COPY README.md ./
COPY src ./src
RUN python3 -m pip install --no-cache-dir --no-deps . \
    && python3 -m pip check \
    && rm -rf build src/*.egg-info \
    && shardtrain warm-up

USER 10001
WORKDIR /home/shardtrain
ENTRYPOINT ["shardtrain"]
CMD ["--help"]
