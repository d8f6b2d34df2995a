"""One replica's training run (`replica`, started by `python -m trainer.task`).

- `training_options`: the training options, declared once.
- `replica_setup`: everything a replica decides before it trains; `paths`: where it writes.
- `distribution`: the training plan applied to TensorFlow (strategy, all-reduce,
  precision).
- `data`: the input pipeline; `callbacks`, `history`: checkpoints, epoch logs, reports.
- `sidecar`: the sidecar evaluator; `ps_server`: parameter-server and worker processes.
- `gpu_check`: no silent CPU training; `step_logs`: per-step logs under collectives.
"""
