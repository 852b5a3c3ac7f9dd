"""The sandbox machinery: everything between the parent and a learner's code.

``launch`` starts and stops one sandboxed child (``limits``: what it may use; ``stage_clock``: the
parent's clock over its stages; ``reap``: its end); ``isolation`` chooses how (``bwrap``,
``dedicated_user``, or nothing), ``reach`` what it may see, and ``cgroup`` (``cgroup_tree``)
bounds a student's sandbox as a whole; ``confine`` (Landlock), ``nonet``, ``space`` and ``eager``
are what the child sets up inside; ``child`` runs in the sandbox (the zygote; ``unit``: one
unit's process, ``calls``: an item's calls, ``tripwires``); ``protocol`` and ``channel`` are the
only ways anything crosses back; ``threads`` keeps the parent's judging to one torch thread per
grading thread. The pipeline steps beside this folder (stage, plan, runner, job, read_back, learn,
compare, feedback, report) never run a learner's code themselves.
"""
