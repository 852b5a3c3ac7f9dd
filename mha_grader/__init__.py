"""mha_grader: the grading engine of mha-course (sandbox, protocol, runner, comparison, reports).

One submission (one student's notebooks, ``runner.grade_submission``) goes through these steps:

1. **Plan** (``runner._plan``, ``plan.py``): the student's wall deadline is fixed; the notebooks
   are read as JSON and their code searched for forbidden names in a memory- and time-limited
   process (``scan.py``); the cases are made from the seed or key (``keys.py``); items that forbid
   the same names form a *unit* with its own staged course package (``stage.py``).
2. **Run** (``job._run``, ``sandbox/launch.py``): one sandboxed child (``isolation.py``:
   bubblewrap, a dedicated user, or none) runs what is left; its writable space is sized
   (``space.py``); it forks one confined process per unit (``child.py``, ``unit.py``,
   ``confine.py``), which runs the cells and calls the items (``calls.py``); the parent times
   each stage on its own clock along the job's plan of stages (``protocol.stage_plan``,
   ``stage_clock.py``) and serves the evidence channels (``channel.py``).
3. **Read back** (``read_back._read_back``, ``protocol.py``): after the child is gone, each
   finished item's status and raw arrays are read without trusting anything, within the
   student's byte budget (``Limits.result_mb``).
4. **Judge** (``compare.py``; one output: ``diagnosis.py``): each item is judged as soon as it is
   read, against the reference computed here (in one torch thread: ``threads.py``); only the
   verdict is kept (``plan.Plan.settle``).
5. **Learn and retry** (``learn._after``): a cell or item that hung or killed the child gets its
   status, and a fresh child runs the rest without it, until all is settled or the deadline.

A class (``classroom.py``) runs that per student on a few threads, then writes the gradebook
(``report.py``, ``outputs.py``); ``merge.py`` joins the gradebooks of shards.

Kept light on purpose: the sandboxed child runs ``python -I -m mha_grader.sandbox.child``, which must
not import torch or matplotlib unless the learner's notebook does. Import the modules you need
(``mha_grader.classroom``, ``mha_grader.runner``, ...); the course's items live in
``mha_course.grading.chapters``.
"""
