"""The grading child's stand-in for ``torch._dynamo`` (``mha_grader/sandbox/eager.py``): an AdamW run
with it imports no compiler and gives the same bits as with the real module; anything else
asked of it loads the real one; FlexAttention still runs."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest
from grading_helpers import ROOT

_RUN = textwrap.dedent("""
    import json, sys, time
    import torch
    from torch import nn
    from mha_grader.sandbox import eager
    deferred = eager.defer_dynamo() if sys.argv[1] == "stand-in" else False
    start = time.process_time()
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(6, 12), nn.GELU(), nn.Linear(12, 6)).double()
    groups = [{"params": [p for p in m.parameters() if p.dim() >= 2], "weight_decay": 0.1},
              {"params": [p for p in m.parameters() if p.dim() < 2], "weight_decay": 0.0}]
    losses = []
    for opt_class in (torch.optim.AdamW, torch.optim.Adam, torch.optim.SGD):
        opt = opt_class(groups, lr=1e-2)
        schedule = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0 / (1 + s))
        for _ in range(3):
            loss = m(torch.randn(4, 6, dtype=torch.float64)).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(m.parameters(), 1.0)
            opt.step()
            schedule.step()
            losses.append(loss.item().hex())
        opt.state_dict()
    print(json.dumps({"deferred": deferred, "cpu": time.process_time() - start, "losses": losses,
                      "still_stand_in": isinstance(sys.modules["torch._dynamo"], eager.LazyDynamo)}))
""")


def _run(mode: str, code: str = _RUN) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", code, mode],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=True,
        timeout=300,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_optimizers_run_without_the_compiler_and_give_the_same_bits():
    lazy, real = _run("stand-in"), _run("real")
    assert lazy["deferred"] and lazy["still_stand_in"], lazy
    assert not real["still_stand_in"]
    assert lazy["losses"] == real["losses"]  # bit for bit
    assert lazy["cpu"] < real["cpu"]  # the import is what it saves (about 1.4 s of 1.5 here)


def test_any_other_name_loads_the_real_module():
    got = _run(
        "",
        textwrap.dedent("""
        import json, sys
        import torch
        from mha_grader.sandbox import eager
        assert eager.defer_dynamo() and not eager.defer_dynamo()  # once
        config = torch._dynamo.config  # not one of the two eager no-ops: the real module
        import torch._dynamo.eval_frame  # a submodule import works too
        real = sys.modules["torch._dynamo"]
        print(json.dumps({"real": not isinstance(real, eager.LazyDynamo), "same": torch._dynamo is real,
                          "config": hasattr(config, "cache_size_limit") or hasattr(config, "recompile_limit")}))
    """),
    )
    assert got == {"real": True, "same": True, "config": True}


def test_flex_attention_runs_with_the_stand_in():
    got = _run(
        "",
        textwrap.dedent("""
        import json, sys
        import torch
        from mha_grader.sandbox import eager
        eager.defer_dynamo()
        from mha_course.ops import flex_masks
        from mha_course.ops.sdpa import scaled_dot_product_attention
        torch.manual_seed(0)
        q, k, v = (torch.randn(1, 2, 16, 8, dtype=torch.float64) for _ in range(3))
        from torch.nn.attention.flex_attention import create_block_mask
        mask = create_block_mask(flex_masks.causal, None, None, 16, 16, device="cpu", BLOCK_SIZE=8)
        out = flex_masks.flex_attention(q, k, v, block_mask=mask)
        ref = scaled_dot_product_attention(q, k, v, is_causal=True)
        print(json.dumps({"err": float((out - ref).abs().max())}))
    """),
    )
    assert got["err"] < 1e-12


def test_introspection_and_submodules_keep_the_stand_in_and_one_copy_of_each_module():
    """``inspect`` asks every module for ``__file__`` (it broke transformers' import when that
    loaded the real package mid-import of torch.distributed); a submodule imports through the
    stand-in, and the real package then uses that same submodule."""
    got = _run(
        "",
        textwrap.dedent("""
        import inspect, json, sys
        import torch
        from mha_grader.sandbox import eager
        eager.defer_dynamo()
        inspect.getmodule(len)
        after_inspect = isinstance(sys.modules["torch._dynamo"], eager.LazyDynamo)
        import torch._dynamo.config as config
        after_submodule = isinstance(sys.modules["torch._dynamo"], eager.LazyDynamo)
        torch._dynamo.reset  # a real name: the real package
        print(json.dumps({"inspect": after_inspect, "submodule": after_submodule,
                          "real": not isinstance(sys.modules["torch._dynamo"], eager.LazyDynamo),
                          "one_config": sys.modules["torch._dynamo.config"] is config is torch._dynamo.config}))
    """),
    )
    assert got == {"inspect": True, "submodule": True, "real": True, "one_config": True}


def test_transformers_imports_with_the_stand_in():
    pytest.importorskip("transformers")
    got = _run(
        "",
        textwrap.dedent("""
        import json
        import torch
        from mha_grader.sandbox import eager
        eager.defer_dynamo()
        from transformers.models.llama.modeling_llama import apply_rotary_pos_emb
        print(json.dumps({"ok": callable(apply_rotary_pos_emb)}))
    """),
    )
    assert got == {"ok": True}
