"""The trainer's step measured on one GPU: the benchmark's cases (`cases`), run by
`benchmarks/gpu.py` and `gpu-pipeline benchmark`, whose results files the training plan
reads (`trainer.cluster.measurements`)."""
