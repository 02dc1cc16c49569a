# The shardtrain image: the CLI, the trainer, the pipeline components' runtime.
# TensorFlow's GPU image pinned by version (CUDA/cuDNN inside; Python 3.11).
FROM tensorflow/tensorflow:2.21.0-gpu

# The package is installed exactly as CI installs it: pinned by constraints.txt.
WORKDIR /opt/shardtrain
COPY pyproject.toml constraints.txt README.md ./
COPY src ./src
RUN python3 -c 'import sys; assert sys.version_info[:2] == (3, 11), sys.version' \
    && python3 -m pip install --no-cache-dir -c constraints.txt . \
    && useradd --create-home --uid 10001 --shell /usr/sbin/nologin shardtrain

USER 10001
WORKDIR /home/shardtrain
ENTRYPOINT ["shardtrain"]
CMD ["--help"]
