"""Stage 2, dataset preparation: image sources -> sharded TFRecords per split, with a manifest.

Modules, in the order the stage uses them:

- `dataset_options`: the stage's declared options (source, image size, splits, shards).
- `sources`: the kinds of source, a package with one module per kind (local and `gs://`
  folders, CSV/JSONL manifests, TFDS, the builtin shapes) beside `base`, what they share:
  their checks, what a source holds and its fingerprint, and how an image is read.
- `shapes`: the builtin dataset, drawn on the fly.
- `splits`: the shard assignment both engines carry out: each example's split and shard, the
  number of shards per split.
- `encode`: the per-image work (read, decode, resize, re-encode) and the local decoding pool.
- `local_engine`, `beam_engine`: the two engines (`dataset.engine`): a process pool here,
  or an Apache Beam pipeline, in process or as a Dataflow job (`dataflow`).
- `written`: what an engine wrote (shards with counts, sizes, hashes; skipped images).
- `prepare`: the stage itself (`prepare_dataset(options, ...)`): the assignment, an engine, then
  the skipped-images rule, the report and the manifest last.
- `dataset_report`: the Markdown report shown in the KFP and Vertex AI UIs.

What the stage writes is the contract in `trainer.common.contract`.
"""
