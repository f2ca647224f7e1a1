"""Infrastructure apart from the science: the sweep, the one DVC adapter, W&B tracking, progress, the warm worker."""
