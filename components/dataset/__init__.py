"""Stage 2, dataset preparation: image sources -> sharded TFRecords per split, with a manifest.

Modules, in the order the stage uses them:

- `options`: the stage's declared options (source, image size, splits, shards).
- `sources`: the kinds of source, one class each, registered once (folders, `gs://`
  prefixes, CSV/JSONL manifests, TFDS, the builtin shapes): their checks, what a source
  holds and its fingerprint, and how an image is read.
- `shapes`: the builtin dataset, drawn on the fly.
- `shard_plan`: the split of each example and the number of shards per split.
- `encode`: the decoding pool that reads, resizes and re-encodes images.
- `prepare`: the stage itself (`prepare_dataset(options, ...)`), writing shards and the
  manifest.
- `dataset_report`: the Markdown report shown in the KFP and Vertex AI UIs.

What the stage writes is the contract in `trainer.contract`.
"""
