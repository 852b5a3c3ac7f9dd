"""Input checks that teach: every error names the argument, the expected shape in
dimension letters (B, L, S, E, H, G, D) and what actually came in.

Letters: inside attention L is the query length and S the key/value length; at the model level
(token ids, embeddings, position tables, the ring's whole sequence) T is the number of tokens.
G is always the number of key/value heads (``num_kv_heads``; ``GPTConfig.n_kv_head`` keeps
nanoGPT's ``n_*`` spelling, as ``n_head`` and ``n_embd``)."""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable
from typing import TypeVar

import torch

F = TypeVar("F", bound=Callable)
C = TypeVar("C", bound=type)


def shape_str(t: torch.Tensor) -> str:
    """``(2, 5, 16)`` — a tensor's shape the way the error messages print it (``(8,)`` for 1-D,
    as Python prints a tuple)."""
    return str(tuple(t.shape))


def check_tensor(name: str, x: object) -> torch.Tensor:
    """``x`` must be a ``torch.Tensor``."""
    if not isinstance(x, torch.Tensor):
        raise ValueError(f"{name}: expected a torch.Tensor, got {type(x).__name__}")
    return x


def check_float(name: str, x: torch.Tensor) -> None:
    """``x`` must hold floating-point numbers (attention needs a softmax)."""
    if not x.is_floating_point():
        raise ValueError(
            f"{name}: expected a floating-point tensor (float16/bfloat16/float32/float64), "
            f"got dtype {x.dtype}"
        )


def check_rank(
    name: str, x: torch.Tensor, letters: str, rank: int | None = None, min_rank: int | None = None
) -> None:
    """``x`` must have exactly ``rank`` (or at least ``min_rank``) dimensions."""
    bad = (rank is not None and x.dim() != rank) or (min_rank is not None and x.dim() < min_rank)
    if bad:
        raise ValueError(
            f"{name}: expected shape {letters}, got {shape_str(x)} ({x.dim()} dimensions)"
        )


def check_size(name: str, x: torch.Tensor, dim: int, size: int, letters: str, what: str) -> None:
    """Dimension ``dim`` of ``x`` must equal ``size`` (``what`` names that size)."""
    if x.shape[dim] != size:
        raise ValueError(
            f"{name}: expected shape {letters} with {what} = {size}, got {shape_str(x)}"
        )


def check_same_dtype(names: tuple[str, ...], xs: tuple[torch.Tensor, ...]) -> None:
    """All tensors must share one dtype (mixing float32 and float64 is usually a bug)."""
    dtypes = {x.dtype for x in xs}
    if len(dtypes) > 1:
        got = ", ".join(f"{n}={x.dtype}" for n, x in zip(names, xs))
        raise ValueError(f"{'/'.join(names)}: expected one dtype, got {got}")


def check_mask_dtype(name: str, mask: torch.Tensor) -> None:
    """A mask is bool (True = may attend / True = padding) or floating (added to scores)."""
    if mask.dtype != torch.bool and not mask.is_floating_point():
        raise ValueError(
            f"{name}: expected a bool mask or a floating-point additive mask, got dtype {mask.dtype}"
        )


def check_broadcast(name: str, mask: torch.Tensor, target: tuple[int, ...], letters: str) -> None:
    """``mask`` must broadcast to ``target`` (e.g. ``(B, H, L, S)``)."""
    ok = mask.dim() <= len(target) and all(
        m in (1, t) for m, t in zip(reversed(mask.shape), reversed(target))
    )
    if not ok:
        want = "(" + ", ".join(str(n) for n in target) + ")"
        raise ValueError(
            f"{name}: expected a shape that broadcasts to {letters} = {want}, got {shape_str(mask)}"
        )


def check_qkv(query: object, key: object, value: object) -> None:
    """The checks every attention kernel needs: three float tensors of one dtype and rank,
    ``query (..., L, D)``, ``key (..., S, D)``, ``value (..., S, Dv)``; key and value share their
    leading sizes and S. (Whether query's leading sizes match key's is the caller's rule: equal,
    broadcastable, or grouped as in GQA.)"""
    for name, t in (("query", query), ("key", key), ("value", value)):
        check_tensor(name, t)
        check_float(name, t)
    check_rank("query", query, "(..., L, D)", min_rank=2)
    check_rank("key", key, "(..., S, D)", rank=query.dim())
    check_rank("value", value, "(..., S, Dv)", rank=query.dim())
    check_same_dtype(("query", "key", "value"), (query, key, value))
    if key.shape[-1] != query.shape[-1]:
        raise ValueError(
            f"key: expected shape (..., S, D) with D = {query.shape[-1]} (query's last size), "
            f"got {shape_str(key)}"
        )
    if value.shape[:-1] != key.shape[:-1]:
        raise ValueError(
            f"value: expected shape (..., S, Dv) with the leading sizes and S of key "
            f"{shape_str(key)}, got {shape_str(value)}"
        )


def check_kv_heads(
    name: str,
    num_heads: int,
    num_kv_heads: object,
    *,
    of: str = "num_heads H",
    got: str | None = None,
) -> None:
    """The course's one "G divides H" check: ``num_kv_heads`` G must be a positive int that
    divides ``num_heads`` H, because each key/value head serves H / G contiguous query heads
    (G = H is MHA, G = 1 MQA, in between GQA). ``of`` names H in the message, ``got`` replaces
    the default ``H=…, G=…`` report of what came in."""
    bad = (
        isinstance(num_kv_heads, bool)
        or not isinstance(num_kv_heads, int)
        or num_kv_heads <= 0
        or num_heads % num_kv_heads != 0
    )
    if bad:
        got = got or f"H={num_heads}, G={num_kv_heads!r}"
        raise ValueError(
            f"{name}: G must be a positive divisor of {of} (each key/value head serves H / G "
            f"query heads); got {got}"
        )


def check_positive_int(name: str, value: object, what: str = "") -> int:
    """The course's one "positive int" check (a bool is not an int here: ``True`` is refused).
    ``what`` names the quantity in the message, e.g. ``"H (query heads)"``; returns ``value``."""
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(
            f"{name}: expected a positive int{' ' + what.strip() if what else ''}, got {value!r}"
        )
    return value


def check_nonnegative_int(name: str, value: object, what: str = "") -> int:
    """``value`` must be an int >= 0 (a length, an offset, a count); returns it."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(
            f"{name}: expected an int >= 0{' ' + what.strip() if what else ''}, got {value!r}"
        )
    return value


def check_base(name: str, base: object) -> float:
    """A RoPE / sinusoid base: a real number > 1 (10000.0 in most models); returns it as float."""
    if isinstance(base, bool) or not isinstance(base, (int, float)) or not base > 1:
        raise ValueError(f"{name}: expected a number > 1 (10000.0 in most models), got {base!r}")
    return float(base)


def check_shape(name: str, x: object, want: tuple[int, ...], letters: str) -> torch.Tensor:
    """``x`` must be a tensor of exactly the shape ``want`` (``letters`` spells it, e.g.
    ``"(B, H, L)"``); for tensors whose shape follows from other arguments (a saved
    log-sum-exp, an output gradient)."""
    check_tensor(name, x)
    if tuple(x.shape) != tuple(want):
        raise ValueError(f"{name}: expected shape {letters} = {tuple(want)}, got {shape_str(x)}")
    return x


def _renamed_warning(where: str, old: str, new: str) -> None:
    warnings.warn(
        f"{where}: {old} was renamed {new}; write {new} (the old name will go away)",
        FutureWarning,
        stacklevel=3,
    )


def renamed_keywords(**renamed: str) -> Callable[[F], F]:
    """``fn(old=x)`` still works as ``fn(new=x)``, with a FutureWarning naming the new keyword, so a
    notebook saved before a rename still runs (``renamed_keywords(block_size="context_length")``);
    passing both names is a ValueError."""

    def wrap(fn: F) -> F:
        where = fn.__qualname__.removesuffix(".__init__")

        @functools.wraps(fn)
        def call(*args, **kwargs):
            for old, new in renamed.items():
                if old in kwargs:
                    if new in kwargs:
                        raise ValueError(
                            f"{old}: renamed {new}; expected only {new}, got both "
                            f"({old}={kwargs[old]!r}, {new}={kwargs[new]!r})"
                        )
                    _renamed_warning(where, old, new)
                    kwargs[new] = kwargs.pop(old)
            return fn(*args, **kwargs)

        return call  # type: ignore[return-value]

    return wrap


def renamed_fields(**renamed: str) -> Callable[[C], C]:
    """A dataclass whose field ``new`` was called ``old``: ``Cls(old=x)``, ``obj.old`` and
    ``obj.old = x`` still work, each with a FutureWarning naming ``new`` (put it above
    ``@dataclass``). Stored dicts with the old keys are the loader's business
    (``gpt.config.from_dict``)."""

    def wrap(cls: C) -> C:
        cls.__init__ = renamed_keywords(**renamed)(cls.__init__)
        for old, new in renamed.items():

            def get(self, old=old, new=new):
                _renamed_warning(type(self).__name__, old, new)
                return getattr(self, new)

            def put(self, value, old=old, new=new):
                _renamed_warning(type(self).__name__, old, new)
                setattr(self, new, value)

            setattr(cls, old, property(get, put, doc=f"Renamed ``{new}``."))
        return cls

    return wrap
