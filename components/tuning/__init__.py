"""Hyperparameter tuning, between stages 3 and 4: the study's options (`options`), AI
Platform's `hyperparameters` (`ai_platform`), the study on one machine (`local_study`,
Open Source Vizier) and the trials table (`trials`)."""
