"""The sandbox machinery: everything between the parent and a learner's code.

``launch`` starts and stops one sandboxed child; ``isolation`` chooses how (bubblewrap, a
dedicated user, or nothing) and ``reach`` what it may see; ``confine`` (Landlock), ``nonet``,
``space`` and ``eager`` are what the child sets up inside; ``child`` runs in the sandbox;
``protocol`` and ``channel`` are the only ways anything crosses back; ``threads`` keeps the
parent's judging to one torch thread per grading thread. The pipeline steps beside this folder
(stage, plan, runner, compare, feedback, report) never run a learner's code themselves.
"""
