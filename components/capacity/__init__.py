"""GPU capacity: the configurations a run may train on, their quota, and stock-outs.

- `alternatives`: the primary configuration and `vertex.fallbacks`, each checked by stage
  1's rules with its own training plan, and what they mean for the dataset and the batch.
- `quotas`: the Vertex AI custom-training quota each configuration needs, read from the
  Cloud Quotas API before a run (`submit`) and before each attempt (the launcher).
- `launcher`: the training step on Vertex AI: a CustomJob per attempt, the next
  alternative after a stock-out or a quota refusal, nothing retried for other failures.
"""
