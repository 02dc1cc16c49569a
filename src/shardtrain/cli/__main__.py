"""``python -m shardtrain.cli``: the ``shardtrain`` command without the console script.

How the tests, the benchmarks and the local TFJob replicas (``shardtrain run-local``, the
pipeline's local train step) run the CLI with this very interpreter.
"""

from shardtrain.cli import main

if __name__ == "__main__":  # not when a spawned worker process re-imports the main module
    main()
