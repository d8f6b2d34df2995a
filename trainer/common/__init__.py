"""What the whole project imports from the trainer; pure Python, no TensorFlow.

- `errors`: the error model (an input error or a failed stage; exit codes 2 and 1).
- `schema`: declared options (pydantic models) and what is derived from them (flags, docs).
- `files`, `commit`: atomic files, and directories published with a marker last.
- `gcs`, `remote`: Cloud Storage paths and clients; one message for Google API errors.
- `contract`, `tfrecord`: the prepared dataset's manifest and shards, written without
  TensorFlow.
"""
