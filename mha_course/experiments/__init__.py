"""Experiments too long for a notebook: each is a command that writes a small stamped results
file the chapter loads (``python -m mha_course.experiments.<name>``)."""
