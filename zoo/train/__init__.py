"""Training: the run train.py does, its callbacks, strategies, FLOPs, checkpoints and run directories."""
