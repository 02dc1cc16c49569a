"""Local stand-ins for a Kubernetes cluster, for tests and for running jobs on one machine.

Not used in production pods:

* :mod:`.processes`: a job's replicas as local processes with an operator-shaped
  ``TF_CONFIG`` (``shardtrain run-local``, the pipeline's ``local=true`` train step).
* :mod:`.node_agent`: a node agent (scheduler + kubelet stand-in) that runs the pods of a
  local control plane (``scripts/k8s-up``) as processes (``shardtrain node run``); with
  :mod:`.pod_env`, :mod:`.pod_dns`, :mod:`.volumes`, :mod:`.containers` and :mod:`.pod_logs`.
"""
