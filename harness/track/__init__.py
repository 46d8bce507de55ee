"""Experiment trackers: curves, eval rows and speed points mirrored to TensorBoard, W&B,
MLflow or a plugin's tracker, beside the store (which stays the source of truth)."""
