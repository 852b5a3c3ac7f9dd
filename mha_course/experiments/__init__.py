"""Experiments too long for a notebook: each is a command that writes a small stamped results
file the chapter loads (``python -m mha_course.experiments.<name>``). The ``*_report`` modules
read those files back for the chapters' evidence cells (tables, bounds, byte layouts), so that a
cell holds only its claim, measurement and assertion."""
