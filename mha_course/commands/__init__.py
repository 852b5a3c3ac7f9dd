"""Subcommands of the ``mha-course`` console script, one module each.

Each module defines ``HELP`` (one line), ``add_arguments(parser)`` and ``run(args) -> int``.
"""
