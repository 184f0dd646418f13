"""Training: the run train.py does, its callbacks, strategies, console, the accelerators' peak FLOP/s and run directories."""
