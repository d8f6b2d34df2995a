"""Stage 4, training: the one stage that differs between the targets.

- `vertex_job`: the Vertex AI CustomJob's worker pools (and `job_names`, its name rules);
  the launcher that submits it is `components.capacity.launcher`.
- `local_cluster`: the trainer as worker processes on localhost.
- `training_report`: the trainer's curves and metrics as KFP artifacts (both targets).

The trainer itself is the `trainer` package, which this stage starts.
"""
