"""What a graded item is: the function a learner writes, how it is fed, what it must return.

A chapter declares its items in ``mha_course/grading/chapters/chNN.py`` as ``ITEMS = [Item(...)]``.
Everything here runs in the GRADING (parent) process: cases come from a seed (NumPy only), the
reference and the mistake variants are computed here, never in the learner's process.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar

import numpy as np

from mha_grader.keys import PublicSeed

# A case is one call: argument name -> value, passed POSITIONALLY in this order.
# Values: np.ndarray (float/int/bool), int, float, bool, None, str, or Dtype("float32").
Case = dict[str, Any]


@dataclass(frozen=True)
class Dtype:
    """A dtype passed as an argument (becomes ``torch.float32`` / ``np.float32`` in the child)."""

    name: str


@dataclass(frozen=True)
class Mistake:
    """A known-wrong way to do the item, and the feedback that names it.

    Give ``variant`` (same signature as the item's reference: it computes what the wrong
    code returns) or ``matches(output, case) -> bool`` (a predicate on the learner's output).
    ``status`` overrides the reported status (default ``"wrong values"``, or ``"wrong shape"``
    when the shape differs), e.g. ``"non-finite"`` for an overflowing softmax.
    """

    name: str
    feedback: str
    variant: Callable[..., Any] | None = None
    matches: Callable[[np.ndarray, Case], bool] | None = None
    status: str | None = None


@dataclass(frozen=True)
class DefsOnly:
    """The item's unit runs the notebook's decorated definitions only, never its cells (see
    ``mha_grader/sandbox/defs_only.py``), and ``check`` must pass before the item is run.

    Args:
        decorators: the dotted decorators whose functions are kept, e.g. ``("triton.jit",)``.
        modules: the modules whose imports are kept, e.g. ``("triton",)`` (submodules too).
        check: ``"module:function"`` run in the unit before any launch:
            ``check(fn, driver, cases_args, extracted, wall_s) -> None | {"verdict": ...}``.
        wall_s: the check's wall-clock limit in seconds (per item).
        setup: modules the unit imports before the definitions (the course's own set-up, e.g.
            one that picks Triton's interpreter on a machine without a GPU).
    """

    decorators: tuple[str, ...]
    modules: tuple[str, ...]
    check: str
    wall_s: float = 60.0
    setup: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True)
class Item:
    """One graded item.

    Args:
        id: the grade id, unique in the course: ``exNN_<what>`` (also the nbgrader ``grade_id``).
        notebook: the exercise notebook's stem, e.g. ``"ex02_scaled_dot_product_attention"``.
        function: the name the learner defines (a function, or a class for a custom driver).
        points: marks for the item (all or nothing).
        task: one line saying what to write (shown in feedback).
        make_cases: ``rng -> list[Case]``; NumPy only, from the grading seed.
        reference: ``(*args) -> tensor/array`` computed in the parent from the package/torch; gets
            the case converted like the learner's function gets it (see ``framework``).
        framework: ``"torch"`` (arrays arrive as tensors) or ``"numpy"`` (as arrays).
        shape: the output's shape in dimension letters, e.g. ``"(B, L, Dv)"`` (for feedback).
        mistakes: known-wrong variants, tried in order when the output is wrong.
        forbidden: dotted names the item must not call, e.g.
            ``"torch.nn.functional.scaled_dot_product_attention"`` (tripwired in the child;
            names in ``STATIC_FORBIDDEN`` are also looked for in the source).
        dtype_must_match: the output dtype must equal the dtype of the first floating input.
        rtol, atol: tolerances for float32; float64 uses ``rtol * 1e-5``, ``atol * 1e-5``.
        memory_mb: a memory bound the KERNEL enforces, for items where the method is the point
            (e.g. "never build the (L, S) matrix"): the item's unit (its own forked process in the
            sandbox) lowers its HARD RLIMIT_AS to (address space after start-up + ``memory_mb``
            MiB) before any submission code runs, so nothing the submission does can lift it.
            Give it a case whose naive answer cannot fit.
        requires: ``(module, how to install it)`` pairs: modules the item's code needs in the
            child (an optional extra). When the item fails and one is not importable here (the
            child runs this interpreter), its feedback leads with how to install it.
        uses: the functions of EARLIER items of the notebook that this item's function calls in
            the solution (ex01's ``attend`` uses ``softmax``), so that a failure there is named
            as the cause (``causes.py``). Grading derives it from the learner's own code where it
            can; this declaration is the fallback, and a test keeps it equal to the solutions'.
        substitutes: ``(function, "mha_course.module.function")`` pairs: the EARLIER items'
            functions (those of ``uses``, and any a learner's version may call where the
            solution's does not) that grading may replace by the course's own when that earlier
            item fails and the learner's function reaches it, so that this item is graded on its
            own (issue #31 item 5; ``substitute.py``). The replacement is a function the sandbox
            holds; the engine stubs every function of every such module of the course out of
            every unit but such a second run.
        label: how feedback names the item to a learner, e.g. ``"task 3"`` (the course hands it in
            through its chapters package's ``item_label``; see ``registry.all_items``); empty:
            ``"item <id>"``.
    """

    kind: ClassVar[str] = "function"
    # the kinds' fields, absent from a plain item (class attributes, not fields)
    driver: ClassVar[str | None] = None
    service: ClassVar[Callable[[Case], Any] | None] = None
    hidden: ClassVar[Sequence[str]] = ()
    prediction: ClassVar[Callable[[list[np.ndarray]], np.ndarray] | None] = None
    defs_only: ClassVar[DefsOnly | None] = None

    id: str
    notebook: str
    function: str
    points: float
    task: str
    make_cases: Callable[[np.random.Generator], list[Case]]
    reference: Callable[..., Any]
    framework: str = "torch"
    shape: str = ""
    mistakes: Sequence[Mistake] = field(default_factory=tuple)
    forbidden: Sequence[str] = field(default_factory=tuple)
    dtype_must_match: bool = True
    rtol: float = 1e-4
    atol: float = 1e-5
    memory_mb: int | None = None
    uses: Sequence[str] = field(default_factory=tuple)
    substitutes: Sequence[tuple[str, str]] = field(default_factory=tuple)
    label: str = ""
    requires: Sequence[tuple[str, str]] = field(default_factory=tuple)

    def missing(self) -> list[str]:
        """How to install each module of ``requires`` that cannot be imported here."""

        def absent(mod: str) -> bool:
            if mod in sys.modules:
                return sys.modules[mod] is None  # blocked (``sys.modules[mod] = None``)
            return importlib.util.find_spec(mod) is None

        return [how for mod, how in self.requires if absent(mod)]

    def cases(self, seed: int | Any) -> list[Case]:
        """The cases for ``seed``: an int (public self-check seed, deterministic per item id and
        seed) or a ``keys.StudentInputs`` (secret per-student grading inputs, see ``keys.py``)."""
        if isinstance(seed, (int, np.integer)):
            seed = PublicSeed(int(seed))
        return self.make_cases(seed.rng(self.id))

    def child_spec(self) -> dict[str, Any]:
        """What the child needs to call the learner's code (never the reference)."""
        return {
            "id": self.id,
            "function": self.function,
            "framework": self.framework,
            "forbidden": list(self.forbidden),
            "driver": self.driver,
            "memory_mb": self.memory_mb,
            "service": self.service is not None,
            "defs_only": None if self.defs_only is None else asdict(self.defs_only),
        }


@dataclass(frozen=True, kw_only=True)
class DriverItem(Item):
    """An item whose learner's code is called by a driver in the child (it builds a module, loads
    weights, launches a kernel): see :class:`Item` for the common fields.

    Args:
        driver: ``"module:function"`` run in the child instead of a plain call, for items that
            need set-up (build a module, load weights): ``driver(obj, *args) -> output``.
        defs_only: run only the notebook's decorated definitions, compiled first (``DefsOnly``).
        hidden: case keys the child never sees (sent as ``None``): what only the parent needs (a service, the reference),
            e.g. the seed of a model's weights or a device's kernel times.
    """

    kind: ClassVar[str] = "driver"
    driver: str = field()  # required (field(): not the base class's None)
    hidden: Sequence[str] = field(default_factory=tuple)
    defs_only: DefsOnly | None = None  # type: ignore[misc]  # a field here, a ClassVar above


@dataclass(frozen=True, kw_only=True)
class ServiceItem(DriverItem):
    """A driver item whose evidence is how the learner USES an object the parent holds.

    Args:
        service: ``case -> channel.Service``, built in the PARENT for each case: an object the
            learner's code uses through a proxy (the driver builds it from ``channel.client()``),
            whose evidence (tokens fed, the device's own clock) the parent judges; see
            ``mha_grader/sandbox/channel.py``. ``Service.judged`` makes the arrays compared with the
            reference from the learner's outputs and that evidence.
    """

    kind: ClassVar[str] = "service"
    service: Callable[[Case], Any] = field()  # required


@dataclass(frozen=True, kw_only=True)
class PredictionItem(DriverItem):
    """A driver item whose function also returns a prediction, recorded in the feedback, not
    graded ("predict, then measure").

    Args:
        prediction: for a "predict, then measure" item whose prediction is recorded, not graded:
            the learner's function returns the graded outputs FOLLOWED BY one more, its
            prediction (numbers). Only the outputs before it are compared with the reference;
            the parent writes the prediction into the feedback in its own words
            (``feedback.prediction_note``). The callable turns a case's graded outputs (once
            they match) into the quantity predicted, e.g. bytes -> ratios to the first.
    """

    kind: ClassVar[str] = "prediction"
    prediction: Callable[[list[np.ndarray]], np.ndarray] = field()  # required


# Distinctive names that the static (AST) check also looks for, besides the runtime tripwire.
STATIC_FORBIDDEN = frozenset(
    {
        "scaled_dot_product_attention",
        "MultiheadAttention",
        "multi_head_attention_forward",
        "flash_attention",
        "_scaled_dot_product_attention_math",
        "_scaled_dot_product_flash_attention",
        "_scaled_dot_product_efficient_attention",
        "_scaled_dot_product_flash_attention_for_cpu",
        "_scaled_dot_product_attention_math_for_mps",
        "_scaled_dot_product_cudnn_attention",
        "_native_multi_head_attention",
    }
)
