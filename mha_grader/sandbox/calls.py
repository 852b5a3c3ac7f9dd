"""One item called in a unit: its cases' arguments, its function (or its driver) on each case,
and what came back as plain NumPy arrays of the protocol's dtypes, or the status of the call.

``_run_item`` puts the course's own earlier functions in place of the learner's where a second
run asks for them (``substitutes``, ``mha_grader/substitute.py``); ``_call_item`` arms the
tripwires for each call and opens a served item's evidence channel (``channel.py``);
``_to_array`` accepts exact plain numbers only (anything else is ``WrongType``). The zygote
(``child.py``) imports this at start-up, before any confinement.
"""

from __future__ import annotations

import contextlib
import importlib
import traceback

from mha_grader.errors import ForbiddenCall
from mha_grader.feedback import exception_report, return_kind
from mha_grader.sandbox import channel
from mha_grader.sandbox.tripwires import Tripwires, _resolve

MAX_ELEMENTS = 20_000_000


class WrongType(Exception):
    """The learner's function returned something that is not plain numbers."""


def _to_array(x, np, torch):
    """One output -> a plain NumPy array (exact types only: no subclasses, no objects, a dtype of
    the protocol's, native byte order). Anything exotic (a sparse, quantized, nested or meta
    tensor, float8, uint32, float128...) is ``WrongType``, never a crash of the unit."""
    if torch is not None and type(x) in (torch.Tensor, torch.nn.Parameter):
        try:
            special = x.layout != torch.strided or x.is_quantized or x.is_nested or x.is_meta
        except Exception:  # noqa: BLE001 - a tensor that cannot even say what it is
            special = True
        if special:
            raise WrongType("sparse or special tensor")
        if x.is_complex() or x.numel() > MAX_ELEMENTS:
            raise WrongType("complex tensor" if x.is_complex() else "too many elements")
        try:
            t = torch.Tensor.detach(x).cpu()
            if t.dtype == torch.bfloat16:
                t = t.float()
            a = np.array(t.numpy(), copy=True)
        except Exception:  # noqa: BLE001 - a dtype NumPy has no name for (float8, uint16...)
            raise WrongType("unusual dtype") from None
    elif type(x) is np.ndarray or isinstance(x, np.generic) or type(x) in (int, float, bool):
        a = np.array(x, copy=True)
        if a.dtype.kind not in "biuf" or a.size > MAX_ELEMENTS:
            raise WrongType("too many elements" if a.size > MAX_ELEMENTS else "object array")
    else:
        raise WrongType(return_kind(x))
    from mha_grader.sandbox.protocol import (
        DTYPES,  # (imports NumPy: not before the job's sys.path is set)
    )

    if a.dtype.name not in DTYPES:
        raise WrongType("unusual dtype")
    return a if a.dtype.isnative else a.astype(a.dtype.newbyteorder("="))


def _outputs(out, np, torch) -> list:
    if type(out) in (tuple, list):
        if len(out) > 8:
            raise WrongType("too many outputs")
        return [_to_array(o, np, torch) for o in out]
    return [_to_array(out, np, torch)]


def _args(spec: list, arrays: dict, framework: str, np, torch) -> list:
    args = []
    for a in spec:
        if "array" in a:
            v = arrays[a["array"]].copy()
            args.append(torch.from_numpy(v) if framework == "torch" else v)
        elif "dtype" in a:
            args.append(
                getattr(torch, a["dtype"]) if framework == "torch" else np.dtype(a["dtype"])
            )
        else:
            args.append(a["value"])
    return args


def _run_item(item: dict, ns: dict, arrays: dict, wires: Tripwires, np, torch) -> tuple[dict, dict]:
    """Call one item on its cases; returns (status json, arrays to save). With ``substitutes``
    (a second run, ``mha_grader/substitute.py``): the learner's earlier functions named there
    are replaced in ``ns`` by the course's own for the call, and put back after."""
    swaps = item.get("substitutes") or {}
    before = {n: ns[n] for n in swaps if n in ns}
    try:
        for name, path in swaps.items():
            ns[name] = _resolve(path)  # from the staged course: present only in this run
        return _call_item(item, ns, arrays, wires, np, torch)
    finally:
        for name in swaps:
            if name in before:
                ns[name] = before[name]
            else:
                ns.pop(name, None)


def _call_item(
    item: dict, ns: dict, arrays: dict, wires: Tripwires, np, torch
) -> tuple[dict, dict]:
    fn = ns.get(item["function"])
    if fn is None:
        return {"status": "missing function"}, {}
    if item.get("static_forbidden"):
        return {"status": "forbidden API", "forbidden": list(item["static_forbidden"])}, {}
    driver = None
    if item.get("driver"):
        mod, _, name = item["driver"].partition(":")
        driver = getattr(importlib.import_module(mod), name)
    saved, shapes = {}, []
    forbidden = set(item["forbidden"])
    wires.hits = set()
    wires.check_imports()  # torch imported by a cell around the import hook?
    if wires.bypassed & forbidden:
        return {"status": "forbidden API", "forbidden": sorted(wires.bypassed & forbidden)}, {}
    for i, case in enumerate(item["cases"]):
        args = _args(case, arrays, item["framework"], np, torch)
        wires.armed = set(forbidden)
        try:
            if item.get("service"):  # this case's object lives in the parent (channel.py)
                channel.client().call("begin", item=item["id"], case=i)
            out = driver(fn, *args) if driver else fn(*args)
        except ForbiddenCall as e:
            return {"status": "forbidden API", "forbidden": [str(e)]}, {}
        except NotImplementedError:
            return {"status": "not implemented"}, {}
        except MemoryError:
            return {"status": "memory limit"}, {}
        except SystemExit as e:
            return {"status": "error", **exception_report(e)}, {}
        except BaseException as e:
            tb = traceback.format_exception_only(type(e), e)[-1].strip()
            if "can't allocate memory" in tb or "not enough memory" in tb.lower():
                return {"status": "memory limit"}, {}
            return {"status": "error", **exception_report(e)}, {}
        finally:
            wires.armed = set()
            if item.get("service"):
                with contextlib.suppress(Exception):
                    channel.client().call("end")
        wires.check_imports()  # ... or by the call itself
        used = wires.hits | (wires.bypassed & forbidden)
        if used:
            return {"status": "forbidden API", "forbidden": sorted(used)}, {}
        try:
            outs = _outputs(out, np, torch)
        except WrongType as e:
            return {"status": "wrong type", "got": str(e)}, {}
        for j, a in enumerate(outs):
            saved[f"c{i}_o{j}"] = a
        shapes.append(len(outs))
    return {"status": "ok", "n_outputs": shapes}, saved
