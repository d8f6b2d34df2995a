"""A team's own models for the shared GPU pipeline (an example of `training.user_code`)."""
