"""mha_grader: the grading engine of mha-course (sandbox, protocol, runner, comparison, reports).

Kept light on purpose: the sandboxed child runs ``python -I -m mha_grader.child``, which must
not import torch or matplotlib unless the learner's notebook does. Import the modules you need
(``mha_grader.classroom``, ``mha_grader.runner``, ...); the course's items live in
``mha_course.grading.chapters``.
"""
