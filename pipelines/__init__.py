"""The top of the project: what a user runs.

- `cli`: the `gpu-pipeline` console script, assembling `commands` (one module per command,
  each `add_parser` and `run`) and mapping errors to exit codes.
- `config`: the run configuration's sections; `config_loading`: loading it (defaults, a
  YAML file, flags), validated and frozen, with the checks across sections.
- `pipeline`: the pipeline definitions (Vertex AI and local), one for both targets;
  `pipeline_arguments`: their parameter values for a configuration.
- `compiler`: the Vertex AI spec compiled (and compared for staleness).
- `local_run`: a run on KFP's local runner; `process_tree`: stopping all it started.
- `model_check`: a user's model built once before any stage runs.
- `yaml_input`: YAML read with bounds and clear errors.
- `vertex`: everything `submit`, `schedule` and `publish` send to Google Cloud.
"""
