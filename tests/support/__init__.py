"""What several test modules share (no tests here).

- `paths`: the checkout's root.
- `vertex_emulator/`: an emulated Vertex AI on loopback (the fake Google APIs, a stand-in
  for Cloud Storage FUSE, the compiled spec run task by task).
- `google_fakes`: real Google client libraries pointed at those fakes, and a recording
  stand-in for the Vertex AI clients; `json_http`: the fakes' JSON handler;
  `dataflow_fake`: a fake Dataflow API that runs the staged Beam pipeline.
- `trainer_processes`: trainer clusters started as processes and killed after an epoch.
- `strategy_probe`: run as `python -m tests.support.strategy_probe`: the all-reduce a
  training plan's strategy really uses.
- `tfds_fixture`: a TFDS dataset prepared on disk without a download.
- `serving`: a free loopback port and held-out images for serving tests.
- `seed_configs`: the source documents' own config.yaml examples.
"""
