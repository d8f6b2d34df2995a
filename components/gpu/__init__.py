"""Stage 1, GPU-configuration validation (it runs first).

- `catalog`: the GPU facts (valid counts per machine type, legacy types, regions, zones),
  each with its source.
- `validation`: Vertex AI worker pools checked against them.
- `ai_platform`: AI Platform Training `config.yaml` converted to Vertex AI worker pools.

Pure Python: importing this package never imports TensorFlow.
"""
