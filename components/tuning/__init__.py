"""Hyperparameter tuning, between stages 3 and 4.

- `tuning_options`: the study's options and the rules between them and training's.
- `ai_platform_study`: AI Platform Training's `hyperparameters` as a `tuning` section.
- `local_study`, `tune_locally`: the study on one machine (Open Source Vizier), each trial a
  local cluster of the trainer.
- `vertex_study`: the study as a Vertex AI HyperparameterTuningJob, and its trials read back.
- `trials`: the trials table and the study's record.
"""
