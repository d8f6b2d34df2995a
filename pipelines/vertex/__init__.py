"""The Vertex AI path: everything `submit`, `schedule` and `publish` send to Google Cloud.

- `clients`: the API clients, created on demand or passed in (tests), and the JSON body of
  a request (what dry runs print).
- `preflight`: the checks run before anything is uploaded or built; `iam`: the caller's
  permissions on the resources where grants are made; `capacity`: each configuration's
  needs held against the project's Vertex AI quotas.
- `spec`: the compiled spec with the components' image pinned.
- `runs`: a prepared run (sources, image, PipelineJob) and `submit`.
- `schedules`: scheduled retraining (PipelineJobSchedule).
- `model_registry`: the models in the Vertex AI Model Registry (`models list`).
- `publishing`: the compiled spec shared with other teams.

Every request is built with the client libraries' own types; `--dry-run` prints it and
sends nothing.
"""
