"""The training cluster and how it trains, decided once; pure Python, no TensorFlow.

- `roles`: Vertex AI's worker pools, their roles and `Layout`, the one layout type (and the
  cluster's words: training machines, workers, parameter servers, evaluator, replicas in
  sync, input pipelines).
- `training_plan`: strategy (`choose_strategy`, the one place), all-reduce, mixed precision
  and XLA for a layout and its GPUs; `accelerators`: what each GPU type is to TensorFlow.
- `tf_config`: this process's place in the cluster, from TF_CONFIG.
- `local`: a cluster on localhost (cores per process, how long to wait for it to form).
- `network`: the cluster's gRPC off proxies; why a cluster did not form.
- `watch`: the process that bounds the wait for a cluster to form.
"""
