"""The training application: what the trainer image runs (`python -m trainer.task`).

It runs alone in its container, so it imports nothing else of the project. Its packages,
each importing only those listed before it:

- `common`: what the whole project imports, pure Python: the error model (`errors`), the
  declared options' machinery (`schema`), atomic files and committed directories (`files`,
  `commit`), Cloud Storage and Google API calls (`gcs`, `remote`), and the prepared
  dataset's contract (`contract`, `tfrecord`).
- `cluster`: the cluster's vocabulary and the training plan, pure Python: roles and the
  layout (`roles`), TF_CONFIG (`tf_config`), a cluster on localhost (`local`), its network
  (`network`), the bound on its forming (`watch`), GPU facts (`accelerators`), and the one
  place that chooses strategy, all-reduce, precision and XLA (`training_plan`).
- `models`: the built-in CNN and heads (`factory`), pretrained backbones (`backbones`) and
  their weights (`weights`), users' models (`user_model`), learning-rate schedules
  (`learning_rate`).
- `serving`: the SavedModel export (`savedmodel`), its measurement (`measure`), how the
  registered model is served (`container`) and the online prediction server (`app`).
- `run`: one replica's training run (`replica`): its options (`training_options`), its
  plan (`replica_setup`), the plan applied to TensorFlow (`distribution`), input pipeline
  (`data`), callbacks, history, sidecar evaluator,
  parameter-server processes (`ps_server`), GPU check, per-step logs and output paths.
"""
