"""Stage 1, GPU-configuration validation (it runs first).

- `configuration`: the one entry, `check_configuration`: the primary configuration and
  every fallback checked, the plan the replicas apply and the input pipelines.
- `alternatives`: the primary configuration and `vertex.fallbacks`, each checked by
  `check_pools` with its own training plan, and what they mean for the dataset's shards
  and the batch.
- `pools`: `check_pools`: every rule of Vertex AI worker pools (the GPU rules, then the
  roles a strategy needs, the scheduling strategy's rules, the Reduction Server's) and the
  training plan the pools run.
- `validation`: the GPU rules (machine type x GPU type x count x region), which also
  normalise the pools as given.
- `worker_pool`: `WorkerPool`, a pool parsed once, and its API form (`to_api`); no
  module below it reads a pool mapping.
- `image_support`: which GPU types the trainer image's CUDA libraries serve.
- `catalog`: the GPU facts (valid counts per machine type, legacy types, regions, zones,
  bandwidth), each with its source; `optimized_zones`: Compute Engine's zones of the
  accelerator-optimized GPU types.
- `regions`: the region and zone rules of a job's GPU types.
- `ai_platform_pools`: AI Platform Training `config.yaml` converted to Vertex AI worker
  pools.

Pure Python: importing this package never imports TensorFlow.
"""
