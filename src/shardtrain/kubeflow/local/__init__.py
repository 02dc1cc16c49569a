"""A training job on one machine, without Kubernetes (not used in production pods).

* :mod:`.processes`: a job's replicas as local processes with an operator-shaped
  ``TF_CONFIG`` (``shardtrain run-local``, ``make demo``, the pipeline's ``local=true`` train
  step).

Kubernetes tests run pods on a real node (scripts/node-up: kubelet, containerd, CoreDNS);
nothing here imitates one.
"""
