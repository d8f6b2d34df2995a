"""GPU capacity: the quota of the configurations a run may train on (stage 1's
`components.gpu.alternatives`), stock-outs, and the cost.

- `quotas`: the Vertex AI custom-training quota each configuration needs, read from the
  Cloud Quotas API before a run (`submit`) and before each attempt (the launcher).
- `launcher`: the training step on Vertex AI: a CustomJob per attempt, the next
  alternative after a stock-out or a quota refusal, nothing retried for other failures.
- `cost`: the dated price table and what every attempt's jobs cost.
"""
