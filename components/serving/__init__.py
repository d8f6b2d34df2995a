"""Serving: the exported model in the real model server, checked before it may serve."""
