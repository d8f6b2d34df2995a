"""Stage 5's second half: which model serves, and where it came from.

- `gate`: the champion/challenger decision (promote, register as a version, or not).
- `local`: the local model registry under `<pipeline_root>/registry/` (run --local).
- `lineage`: what every registered model carries about its making.
"""
