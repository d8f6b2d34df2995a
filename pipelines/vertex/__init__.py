"""The Vertex AI path: everything `submit`, `schedule` and `publish` send to Google Cloud.

- `clients`: the API clients, created on demand or passed in (tests).
- `preflight`: the checks run before anything is uploaded or built.
- `spec`: the compiled spec with the components' image pinned.
- `runs`: a prepared run (sources, image, PipelineJob) and `submit`.
- `schedules`: scheduled retraining (PipelineJobSchedule).
- `publish`: the compiled spec shared with other teams.

Every request is built with the client libraries' own types; `--dry-run` prints it and
sends nothing.
"""
