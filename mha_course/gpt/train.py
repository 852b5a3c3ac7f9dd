"""Chapter 13: the training loop behind ``mha-course train`` — one process or many.

One process: plain AdamW steps. Under ``torchrun --nproc_per_node P``: each process holds a
copy of the model wrapped in :class:`torch.nn.parallel.DistributedDataParallel`, takes its
``B / P`` slice of the same global batch (see :mod:`mha_course.gpt.data`), and DDP averages
the gradients across processes during ``backward`` (gloo on CPU, NCCL on GPU) — so P processes
take exactly the step one process would take on the whole batch, up to rounding.

The run is resumable: every ``eval_interval`` steps a float32 ``*.resume.pt`` (weights, optimizer
state, step, loss curve) is written; ``resume=True`` continues from it exactly, because each
step's batch depends only on ``(seed, step)``.
"""

from __future__ import annotations

import json
import math
import os
import time
from pathlib import Path

import torch

from mha_course.gpt.checkpoint import load_checkpoint, resume_path, save_checkpoint
from mha_course.gpt.config import GPTConfig, TrainConfig
from mha_course.gpt.convert import convert_to_gqa
from mha_course.gpt.corpus import check_corpus, load_corpus
from mha_course.gpt.data import training_batch
from mha_course.gpt.evaluate import evaluate
from mha_course.gpt.model import GPT, lm_loss
from mha_course.gpt.tokenizer import CharTokenizer


def learning_rate(step: int, tc: TrainConfig) -> float:
    """Linear warm-up, then cosine decay to ``min_lr`` at ``lr_decay_iters`` (nanoGPT's)."""
    decay_iters = tc.lr_decay_iters or tc.max_iters
    if step < tc.warmup_iters:
        return tc.learning_rate * (step + 1) / (tc.warmup_iters + 1)
    if step >= decay_iters:
        return tc.min_lr
    ratio = (step - tc.warmup_iters) / max(1, decay_iters - tc.warmup_iters)
    return tc.min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (tc.learning_rate - tc.min_lr)


def make_optimizer(model: GPT, tc: TrainConfig) -> torch.optim.AdamW:
    """AdamW; weight decay on matrices (embeddings, projections), none on norms and biases."""
    params = [p for p in model.parameters() if p.requires_grad]
    groups = [
        {"params": [p for p in params if p.dim() >= 2], "weight_decay": tc.weight_decay},
        {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
    ]
    return torch.optim.AdamW(groups, lr=tc.learning_rate, betas=(tc.beta1, tc.beta2))


def distributed_context() -> tuple[int, int, bool]:
    """(rank, world_size, started_here): joins the process group when torchrun launched us."""
    import torch.distributed as dist

    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world == 1:
        return 0, 1, False
    if dist.is_initialized():
        return dist.get_rank(), dist.get_world_size(), False
    dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    return dist.get_rank(), dist.get_world_size(), True


def _stamp(device: torch.device) -> dict:
    from mha_course.benchmark.stamp import environment_stamp

    stamp = environment_stamp(device)
    if hasattr(os, "getloadavg"):
        stamp["load_average_1min"] = round(os.getloadavg()[0], 2)
    return json.loads(json.dumps(stamp, default=str))  # plain types (torch.load weights_only)


def train(
    model_config: GPTConfig,
    train_config: TrainConfig,
    out: str | Path,
    *,
    resume: bool = False,
    init_from: str | Path | None = None,
    convert_kv_heads: int | None = None,
    device: str | torch.device = "cpu",
    progress: bool = True,
    save: bool = True,
) -> tuple[GPT, dict]:
    """Train a :class:`GPT` on the standard-library corpus; write checkpoint ``out``.

    ``init_from`` starts from a shipped checkpoint's weights (its model config is used);
    with ``convert_kv_heads`` G its attention is first mean-pooled to G key/value heads
    (chapter 7's ``mha_to_gqa``) — the uptraining of the GQA paper. Returns the model and the
    stored metadata (loss curve, final validation loss, wall time, stamp).
    """
    from tqdm.auto import tqdm

    rank, world, started = distributed_context()
    device = torch.device(device)
    if device.type == "cuda" and world > 1:
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
    dtype = getattr(torch, train_config.dtype)
    corpus = load_corpus()
    source_meta = {}
    if init_from is not None:
        source = load_checkpoint(init_from, verify_corpus=False)
        tokenizer, model = source.tokenizer, source.model
        source_meta = {
            "init_from": Path(init_from).name,
            "init_from_val_loss": source.meta.get("val_loss"),
        }
        check_corpus(corpus, source.meta["corpus_sha256"], what=Path(init_from).name)
        if convert_kv_heads is not None:
            model = convert_to_gqa(model, convert_kv_heads)
            source_meta["converted_kv_heads"] = convert_kv_heads
        model_config = model.config
    else:
        tokenizer = CharTokenizer.from_text(corpus.text)
        model_config.vocab_size = tokenizer.vocab_size
        torch.manual_seed(train_config.seed)
        model = GPT(model_config)
    train_ids, val_ids = tokenizer.encode(corpus.train), tokenizer.encode(corpus.val)
    model.to(device=device, dtype=dtype).train()
    if init_from is not None and rank == 0 and not resume:  # e.g. the converted model, untrained
        source_meta["val_loss_at_start"] = round(
            evaluate(
                model,
                val_ids,
                model_config.context_length,
                max_windows=train_config.final_eval_windows,
            ),
            5,
        )
    optimizer = make_optimizer(model, train_config)
    history = {"step": [], "train_loss": [], "val_step": [], "val_loss": []}
    start_step, wall_before = 0, 0.0
    state_path = resume_path(out)
    if save and rank == 0:
        state_path.parent.mkdir(parents=True, exist_ok=True)
    if resume and state_path.is_file():
        state = torch.load(state_path, map_location=device, weights_only=True)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        start_step, history, wall_before = state["step"], state["history"], state["wall_time_s"]
    ddp = model
    if world > 1:
        from torch.nn.parallel import DistributedDataParallel

        ddp = DistributedDataParallel(
            model, device_ids=[device.index] if device.type == "cuda" else None
        )
    tc, T = train_config, model_config.context_length
    tokens_per_step = tc.batch_size * T
    bar = tqdm(
        range(start_step, tc.max_iters),
        initial=start_step,
        total=tc.max_iters,
        desc="training",
        disable=not progress or rank != 0,
        mininterval=1.0,
    )
    t0 = time.perf_counter()
    for step in bar:
        lr = learning_rate(step, tc)
        for group in optimizer.param_groups:
            group["lr"] = lr
        torch.manual_seed(tc.seed + 7919 * step + rank)  # dropout masks, reproducible
        x, y = training_batch(train_ids, T, tc.batch_size, tc.seed, step, rank, world)
        loss = lm_loss(ddp(x.to(device)), y.to(device))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()  # under DDP the gradients are averaged over processes here
        if tc.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), tc.grad_clip)
        optimizer.step()
        history["step"].append(step)
        history["train_loss"].append(round(loss.item(), 5))  # this rank's share of the batch
        done = step + 1
        elapsed = wall_before + time.perf_counter() - t0
        speed = tokens_per_step * (done - start_step) / max(elapsed - wall_before, 1e-9)
        bar.set_postfix(loss=f"{loss.item():.3f}", tok_s=f"{speed:,.0f}")
        if rank == 0 and (done % tc.eval_interval == 0 or done == tc.max_iters):
            history["val_step"].append(done)
            history["val_loss"].append(
                round(evaluate(model, val_ids, T, max_windows=tc.eval_windows), 5)
            )
            if save:
                torch.save(
                    {
                        "model": model.state_dict(),
                        "optimizer": optimizer.state_dict(),
                        "step": done,
                        "history": history,
                        "wall_time_s": elapsed,
                    },
                    state_path,
                )
    bar.close()
    wall = wall_before + time.perf_counter() - t0
    meta = {}
    if rank == 0:
        meta = {
            "corpus_sha256": corpus.sha256,
            "train_chars": len(corpus.train),
            "val_chars": len(corpus.val),
            "history": history,
            "wall_time_s": round(wall, 2),
            "world_size": world,
            "steps": tc.max_iters,
            "tokens_seen": tc.max_iters * tokens_per_step,
            "num_parameters": model.num_parameters(),
            "stamp": _stamp(device),
            "torch_threads": torch.get_num_threads(),
            **source_meta,
        }
        if save:
            save_checkpoint(out, model, tc, tokenizer, meta)
            # The reported loss is the shipped (float16-rounded) weights' loss on all of val.
            shipped = load_checkpoint(out, device=device, verify_corpus=False)
            n = tc.final_eval_windows
            meta["val_loss"] = round(evaluate(shipped.model, val_ids, T, max_windows=n), 5)
            meta["val_loss_float32"] = round(evaluate(model, val_ids, T, max_windows=n), 5)
            save_checkpoint(out, model, tc, tokenizer, meta)
        else:
            meta["val_loss"] = round(
                evaluate(model, val_ids, T, max_windows=tc.final_eval_windows), 5
            )
    if started:
        import torch.distributed as dist

        # Rank 0 writes and evaluates the checkpoint while the others wait here: a rank that tore
        # its gloo group down while rank 0 was still connected aborted once in CI (SIGABRT at exit).
        dist.barrier()
        dist.destroy_process_group()
    model.eval()
    return model, meta
