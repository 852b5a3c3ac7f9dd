"""Package functions that compute an item's answer are on its forbidden list (attack class 1, part:
"a package function not on the item's list"). Each shortcut below is a CORRECT answer made by
calling the package (or torch) instead of doing the task; before the lists were reviewed each got
full marks, now each is "forbidden API". Every forbidden name resolves."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from grading_helpers import build, grade_many

from mha_course.grading import all_items
from mha_grader.sandbox.child import _resolve


def _fn(head: str, body: str) -> str:
    return (
        "import mha_course, torch\n"
        + head
        + "\n"
        + "\n".join("    " + ln for ln in body.strip().split("\n"))
    )


SHORTCUTS = {  # (exercise, item) -> the shortcut cell
    ("ex01", "ex01_softmax"): _fn(
        "def softmax(x):", "return mha_course.stable_softmax(torch.from_numpy(x), -1).numpy()"
    ),
    ("ex03", "ex03_head_forward"): _fn(
        "def self_attention_head(x, W_Q, W_K, W_V):",
        "return mha_course.tiled_attention(x @ W_Q, x @ W_K, x @ W_V)",
    ),
    ("ex04", "ex04_mha_forward"): _fn(
        "def mha_forward(x, W_Q, W_K, W_V, W_O, num_heads):",
        """
q, k, v = (mha_course.split_heads(x @ W, num_heads) for W in (W_Q, W_K, W_V))
return mha_course.merge_heads(mha_course.tiled_attention(q, k, v)) @ W_O""",
    ),
    ("ex04", "ex04_mha_params"): _fn(
        "def mha_param_count(E, num_heads, bias):",
        "return sum(p.numel() for p in mha_course.MultiHeadAttention(E, num_heads, bias=bias).parameters())",
    ),
    ("ex05", "ex05_decode_step"): _fn(
        "def decode_step(q_new, k_new, v_new, k_cache, v_cache):",
        """
k, v = torch.cat([k_cache, k_new], -2), torch.cat([v_cache, v_new], -2)
L, S = q_new.shape[-2], k.shape[-2]
mask = mha_course.causal_mask(L, S, offset=S - L)
return torch.nn.functional.scaled_dot_product_attention(q_new, k, v, attn_mask=mask), k, v""",
    ),
    ("ex07", "ex07_repeat_kv"): _fn(
        "def repeat_kv_heads(x, n_rep):",
        "return x[:, mha_course.kv_group_of_query_heads(x.shape[1] * n_rep, x.shape[1])]",
    ),
    ("ex08", "ex08_decode_kv_bytes"): _fn(
        "def decode_kv_bytes(batch, num_heads, num_kv_heads, head_dim, context, dtype):",
        "return mha_course.kv_cache_bytes(1, num_kv_heads, head_dim, seq_len=context, batch=batch, dtype=dtype)",
    ),
    ("ex10", "ex10_kv_groups_kept"): _fn(
        "def kv_groups_kept(num_heads, num_kv_heads, drop):",
        """
group = mha_course.kv_group_of_query_heads(num_heads, num_kv_heads)
alive = torch.ones(num_heads, dtype=torch.bool)
alive[torch.as_tensor(drop, dtype=torch.long)] = False
return torch.stack([alive[group == g].any() for g in range(num_kv_heads)])""",
    ),
    ("ex02", "ex02_predict_flops"): _fn(
        "def predict_attention_flops(B, H, L, S, D, Dv):",
        """
from mha_course.benchmark.flops import attention_flops
return (attention_flops(B, H, L, S, D) + attention_flops(B, H, L, S, Dv)) // 2""",
    ),
    ("ex07", "ex07_predict_gqa_params"): _fn(
        "def predict_gqa_params(E, num_heads, num_kv_heads, bias):",
        "return sum(p.numel() for p in mha_course.MultiHeadAttention(E, num_heads, num_kv_heads=num_kv_heads, bias=bias).parameters())",
    ),
    ("ex07", "ex07_smallest_cache"): _fn(
        "def smallest_cache(configs):",
        """
dtypes = {1: torch.float8_e4m3fn, 2: torch.bfloat16, 4: torch.float32}
sizes = [mha_course.kv_cache_bytes(int(n), int(g), int(d), dtype=dtypes[int(b)]) for n, h, g, d, b in configs]
return sizes.index(min(sizes))""",
    ),
    ("ex09", "ex09_predict_causal_tiles"): _fn(
        "def predict_causal_tiles(L, S, block_q, block_k):",
        """
from unittest import mock
import mha_course.kernels.tiled
calls, real = [], mha_course.kernels.tiled.online_softmax_update
with mock.patch.object(mha_course.kernels.tiled, "online_softmax_update", lambda *a, **kw: calls.append(1) or real(*a, **kw)):
    mha_course.tiled_attention(torch.randn(L, 1), torch.randn(S, 1), torch.randn(S, 1), is_causal=True, block_q=block_q, block_k=block_k)
return len(calls)""",
    ),
    ("ex12", "ex12_alibi"): _fn(
        "def alibi(num_heads, L, S):", "return mha_course.alibi_bias(num_heads, L, S)"
    ),
    ("ex13", "ex13_sampling_probs"): _fn(
        "def sampling_probs(logits, temperature, top_k):",
        """
from mha_course.gpt.generate import sampling_distribution
return sampling_distribution(logits, temperature, top_k)""",
    ),
    ("ex13", "ex13_block"): _fn(
        "def Block(config):",
        """
from mha_course.gpt.model import Block as CourseBlock
return CourseBlock(config)""",
    ),
    # the staged drivers build the course's GPT for the training item: through them the model's
    # classes are still the ex13_gpt unit's stubs (with ex13_gpt's forbidden list emptied, this
    # shortcut scored 2/2)
    ("ex13", "ex13_gpt"): _fn(
        "def SmallGPT(config):",
        """
import importlib
drivers = importlib.import_module("mha_course.grad" + "ing.drivers")
c = config
return drivers.course_gpt(0, c.vocab_size, c.context_length, c.n_layer, c.n_head, c.kv_heads, c.n_embd, c.bias).float()""",
    ),
    ("ex13", "ex13_train_steps"): _fn(
        "def train_steps(model, tc, xs, ys, start):",
        """
from mha_course.gpt.model import lm_loss
from mha_course.gpt.train import learning_rate, make_optimizer
opt, losses, lrs = make_optimizer(model, tc), [], []
for i in range(xs.shape[0]):
    lrs.append(learning_rate(start + i, tc))
    for g in opt.param_groups:
        g["lr"] = lrs[-1]
    loss = lm_loss(model(xs[i]), ys[i])
    opt.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), tc.grad_clip)
    opt.step()
    losses.append(loss.detach())
return torch.stack(losses), torch.tensor(lrs, dtype=torch.float64)""",
    ),
    ("ex14", "ex14_window_mask"): _fn(
        "def window_mask(L, S, window, num_sink):",
        "return mha_course.sliding_window_mask(L, S, window=window, offset=S - L, num_sink=num_sink)",
    ),
    ("ex14", "ex14_ring_slots"): _fn(
        "def ring_slots(positions, window, num_sink):",
        """
out = []
for p in positions.tolist():
    cache, z = mha_course.SlidingWindowCache(window, num_sink), torch.zeros(1, 1, p + 1, 1)
    cache.update(z, z)
    out.append(-1 if p < num_sink else int((cache.slot_position == p).nonzero()))
return torch.tensor(out)""",
    ),
    ("ex14", "ex14_ring_write"): _fn(
        "def ring_write(ring, slot_position, new, start, num_sink):",
        """
cache = mha_course.SlidingWindowCache(ring.shape[2], num_sink)
cache.update(torch.zeros_like(new[:, :, :1]).expand(-1, -1, start, -1), torch.zeros_like(new[:, :, :1]).expand(-1, -1, start, -1))
cache.key, cache.slot_position = ring.clone(), slot_position.clone()
cache.update(new, new)
return cache.key, cache.slot_position""",
    ),
    ("ex14", "ex14_layout_bytes"): _fn(
        "def interleaved_cache_bytes(num_layers, global_every, window, num_sink, num_kv_heads, head_dim, seq_len, batch, dtype):",
        """
windows = [None if (i + 1) % global_every == 0 else window for i in range(num_layers)]
return mha_course.layout_cache_bytes(windows, num_kv_heads, head_dim, seq_len, batch, dtype, num_sink=num_sink)""",
    ),
    ("ex15", "ex15_latent_step"): _fn(
        "def latent_cache_step(x, W_DKV, W_KR, latent_cache, rope_cache):",
        """
S_old, L = latent_cache.shape[1], x.shape[1]
cache = mha_course.LatentKVCache()
cache.update(latent_cache, rope_cache)
k_r = mha_course.apply_rope((x @ W_KR.T)[:, None], torch.arange(S_old, S_old + L))[:, 0]
return cache.update(x @ W_DKV.T, k_r)""",
    ),
    ("ex15", "ex15_absorb_query"): _fn(
        "def absorb_query(W_UQ, W_UK, num_heads):",
        """
m = mha_course.MultiHeadLatentAttention(W_UQ.shape[1], num_heads, latent_dim=W_UK.shape[1], head_dim=W_UQ.shape[0] // num_heads, dtype=W_UQ.dtype)
with torch.no_grad():
    m.q_up.weight.copy_(W_UQ)
    m.k_up.weight.copy_(W_UK)
    return m.absorbed_weights()[0]""",
    ),
    ("ex15", "ex15_kv_bytes_per_token"): _fn(
        "def kv_bytes_per_token(num_layers, num_kv_heads, head_dim, latent_dim, rope_dim, dtype):",
        "return mha_course.kv_cache_bytes(num_layers, num_kv_heads, head_dim, dtype=dtype, latent_dim=latent_dim, rope_dim=rope_dim)",
    ),
    ("ex16", "ex16_quantize"): _fn(
        "def quantize_int8(x, axis):", "return mha_course.quantize(x, axis)"
    ),
    ("ex16", "ex16_block_lookup"): _fn(
        "def block_lookup(block_table, positions, block_size):",
        """
N = int(block_table.max()) + 1
pool = mha_course.BlockPool(N * block_size, block_size, 1, 2, dtype=torch.float64)
pool.key[:, 0, :, 0] = torch.arange(N, dtype=torch.float64)[:, None]
pool.key[:, 0, :, 1] = torch.arange(block_size, dtype=torch.float64)[None, :]
cache = mha_course.PagedKVCache(pool)
cache.tables["s"], cache.lengths["s"] = block_table.tolist(), len(block_table) * block_size
where = cache.gather("s")[0][0, positions].long()
return where[:, 0], where[:, 1]""",
    ),
    ("ex16", "ex16_cache_waste"): _fn(
        "def cache_waste(lengths, block_size, max_len):",
        """
ls, used = lengths.tolist(), int(lengths.sum())
return mha_course.slots_needed(ls, block_size) - used, mha_course.slots_needed(ls, None, max_len) - used""",
    ),
    ("ex17", "ex17_d_term"): _fn(
        "def d_term(out, d_out):",
        "return mha_course.kernels.flash_backward.backward_d_term(out, d_out)",
    ),
    ("ex18", "ex18_block_kinds"): _fn(
        "def block_kinds(mask, block):",  # torch's own builder, from the dense mask
        """
from torch.nn.attention.flex_attention import create_block_mask
L, S = mask.shape
bm = create_block_mask(lambda b, h, q, k: mask[q.clamp(max=L - 1), k.clamp(max=S - 1)], None, None, L, S,
                       device="cpu", BLOCK_SIZE=block)
kinds = torch.zeros(-(-L // block), -(-S // block), dtype=torch.long)
for r in range(kinds.shape[0]):
    kinds[r, bm.kv_indices[0, 0, r, : bm.kv_num_blocks[0, 0, r]]] = 1
    if bm.full_kv_num_blocks is not None:
        kinds[r, bm.full_kv_indices[0, 0, r, : bm.full_kv_num_blocks[0, 0, r]]] = 2
return kinds""",
    ),
    ("ex19", "ex19_zigzag_positions"): _fn(
        "def zigzag_positions(rank, world_size, T):",
        """
from mha_course.kernels import ring
return ring.shard(torch.arange(T)[:, None], rank, world_size, "zigzag")[:, 0]  # (T, 1) -> (T / P,)""",
    ),
    # the capstones' references live in the staged grading package (a cell naming it is not run,
    # so the name is built): absent there too
    ("ex16", "ex16_serve"): _fn(
        "def serve(model, prompts, arrivals, max_new, block_size, num_blocks, num_steps):",
        """
import importlib
serve_reference = importlib.import_module("mha_course.grad" + "ing.serving_reference").serve_reference
return serve_reference(prompts.numpy(), arrivals.numpy(), max_new.numpy(), block_size, num_blocks, num_steps)""",
    ),
    ("ex19", "ex19_safe_merge"): _fn(
        "def merge_safe(out_a, lse_a, out_b, lse_b):",
        """
import importlib
ch19 = importlib.import_module("mha_course.grad" + "ing.chapters.ch19")
return ch19._merge_ref(out_a, lse_a, out_b, lse_b)""",
    ),
    ("ex19", "ex19_ring_step"): _fn(
        "def ring_step(out, lse, query, key, value, q_pos, k_pos, is_causal, scale):",
        """
import importlib
ch19 = importlib.import_module("mha_course.grad" + "ing.chapters.ch19")
return ch19._step("ok")(out, lse, query, key, value, q_pos, k_pos, is_causal, scale)""",
    ),
}

# Shortcuts into the course's grading policy: it is not staged at all (mha_grader/stage.py), so
# the import itself fails, whatever the forbidden lists say.
NOT_STAGED = {"ex16_serve", "ex19_safe_merge", "ex19_ring_step"}

CALLERS = {
    "ex01_softmax": {"ex01_attend"},
    "ex07_repeat_kv": {"ex07_gqa_forward"},
    "ex14_ring_slots": {"ex14_ring_write"},
    "ex19_safe_merge": {"ex19_ring_step"},
    "ex13_block": {"ex13_gpt"},
}


def test_every_forbidden_name_resolves():
    for it in all_items():
        for name in it.forbidden:
            _resolve(name)  # raises if a name is misspelled or moved


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("shortcuts")
    return grade_many(
        {
            item: (build(ex, tmp / item / "sub.ipynb", replace={item: src}), ex)
            for (ex, item), src in SHORTCUTS.items()
        }
    )


@pytest.mark.parametrize("ex,item", list(SHORTCUTS), ids=[i for _, i in SHORTCUTS])
def test_a_package_shortcut_is_forbidden(ex, item, graded):
    results, notes = graded[item]
    r = results[item]
    why = ("error", "ModuleNotFoundError") if item in NOT_STAGED else ("forbidden API", "")
    assert (r.points, r.status) == (0.0, why[0]) and why[1] in r.message, (
        f"{item}: {r.status}: {r.message} {notes}"
    )
    # items whose solution calls this one may lose their marks too, for the same reason only (when
    # they share the staged package, i.e. a unit, with it)
    users = CALLERS.get(item, set())
    assert all(
        results[u].passed or (results[u].status, why[1] in results[u].message) == (why[0], True)
        for u in users
    ), {u: results[u] for u in users}
    others = [
        f"{o.id}: {o.status}"
        for o in results.values()
        if o.id not in {item, *users} and not o.passed
    ]
    assert not others, others  # the rest of the notebook is graded normally


def test_the_instructor_guides_counts_of_stripped_functions_match_the_items():
    """docs/instructor_guide.md's table says, per item, how many course functions are stripped;
    each number is the item's forbidden list's (they were written by hand and went stale)."""
    guide = (Path(__file__).resolve().parents[2] / "docs" / "instructor_guide.md").read_text()
    rows = re.findall(r"^\| `(ex\d\d_\w+)` \| [^|]*\| (\d+) course fns", guide, flags=re.M)
    assert len(rows) > 60, len(rows)
    items = {it.id: it for it in all_items()}
    wrong = {
        item: (int(n), sum(f.startswith("mha_course.") for f in items[item].forbidden))
        for item, n in rows
        if int(n) != sum(f.startswith("mha_course.") for f in items[item].forbidden)
    }
    assert not wrong, f"item: (the guide's count, the list's): {wrong}"
