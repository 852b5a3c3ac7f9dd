"""One module per chapter, ``chNN.py``, each defining ``ITEMS: list[Item]`` (see docs/grading.md)."""
