"""The pipeline's stages: one package per stage, each a set of plain, testable modules
under the thin KFP components of `ops`.

- `gpu`: stage 1, GPU-configuration validation (`gpu.pools.check_pools`, the entry point).
- `dataset`: stage 2, dataset preparation (sharded TFRecords and their manifest).
- `build`: stage 3, the trainer's images (build context, Cloud Build, lock files).
- `training`: stage 4, training on local worker processes or as a Vertex AI CustomJob.
- `tuning`: a hyperparameter study before stage 4 (Open Source Vizier locally, Vertex AI
  Vizier on Vertex AI).
- `capacity`: the configurations stage 4 may train on, their quota, and stock-outs.
- `export`: stage 5, the model exported behind the champion/challenger gate.
- `ops`: the KFP components, thin interfaces over the modules above.

Beside them, what several stages share: `images` (every image the project names, once),
`vertex_options` (the Vertex AI options), `cloud_names` (Google Cloud names and URIs),
`stage` (a stage's log lines and errors), `progress` (progress of long stages) and
`project` (the project's name and version).
"""
