"""Pictures: training curves, mask pictures, attention maps."""
