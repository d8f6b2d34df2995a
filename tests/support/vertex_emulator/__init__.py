"""An emulated Vertex AI on loopback, to run the compiled spec end to end without a cloud.

- `apis`: a fake of the Google REST APIs the run calls (Vertex AI CustomJobs and model
  uploads, Cloud Build, Artifact Registry) on 127.0.0.1; it records every request and
  starts a CustomJob's replicas as local processes with the environment Vertex AI sets.
- `mount`: a stand-in for Cloud Storage FUSE (`/gcs/`): a local directory mirrored with
  the Cloud Storage emulator, on which directory renames fail.
- `pipelines`: runs a CreatePipelineJobRequest's spec task by task, as Vertex AI
  Pipelines would: executor inputs through protobuf Struct, `gs://` artifact URIs,
  Google's own launchers for the google-cloud-pipeline-components tasks.
- `site/sitecustomize.py`: loaded by every process the emulation starts; points Google's
  clients at the fake and the `/gcs/` prefix at the stand-in mount.
"""
