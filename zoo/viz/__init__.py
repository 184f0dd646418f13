"""Pictures of a checkpoint or a config: attention maps, detected boxes, mask pictures (a run's own
curves and confusion matrix are :mod:`zoo.plots`')."""
