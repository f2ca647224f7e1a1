"""Infrastructure apart from the science: the warm worker of the stage processes (more to come: sweep, tracking, progress)."""
