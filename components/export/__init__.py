"""Stage 5, export: the new model measured beside the champion, the gate's decision, and
the model exported (and, locally, registered) with its lineage.

- `export_model`: the stage (`run_export_stage`, `export_and_gate`) and the champion on
  Vertex AI;
- `saved_models`: committed SavedModels: their metrics on a dataset, publishing a copy;
- `gate`: the champion/challenger decision (promote, register as a version, or not);
- `lineage`: what every model carries about its making (labels, description);
- `local_registry`: the local model registry under `<pipeline_root>/registry/` (run --local).
"""
