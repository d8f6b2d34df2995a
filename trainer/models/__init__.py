"""The models a run trains (tf-keras).

- `factory`: the built-in CNN, a backbone under a new head, compiling and fine-tuning, and
  the model of a replica's setup.
- `backbones`, `weights`: the pretrained `keras.applications` backbones and where their
  weights come from.
- `user_model`: a user's own model (`training.model: "package.module:function"`).
- `learning_rate`: learning-rate warm-up and decay.
"""
