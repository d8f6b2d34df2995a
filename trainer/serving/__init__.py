"""The trained model as it leaves the trainer and is served.

- `savedmodel`: the SavedModel export with serving signatures (the chief commits it).
- `measure`: a SavedModel's metrics through its serving signature.
- `container`: its signatures and the Model Registry container spec.
- `app`: online prediction behind Vertex AI's custom-container contract
  (`python -m trainer.serving.app`).
"""
