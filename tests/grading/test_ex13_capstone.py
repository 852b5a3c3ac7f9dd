"""ex13's capstone items: the grader's state names are the course modules', its variants equal the
course's forward with their switches off, a shipped checkpoint loads through the same path, and
its training reference takes the steps ``mha-course train`` takes (its loss curve)."""

from __future__ import annotations

import pytest
import torch
from grading_helpers import ROOT

from mha_course.gpt.checkpoint import load_checkpoint
from mha_course.gpt.config import GPTConfig, TrainConfig
from mha_course.gpt.corpus import load_corpus
from mha_course.gpt.data import training_batch
from mha_course.gpt.model import GPT, Block
from mha_course.gpt.tokenizer import CharTokenizer
from mha_course.gpt.train import learning_rate, train
from mha_course.grading.chapters import ch13_capstone as C
from mha_course.grading.chapters import ch13_train as T

CONFIGS = [
    C.gpt_config(11, 8, 2, 4, 4, 16, False),
    C.gpt_config(7, 5, 1, 6, 2, 12, True),
    C.gpt_config(9, 6, 3, 4, 1, 8, False),
]


def _shapes(module: torch.nn.Module) -> dict[str, tuple[int, ...]]:
    return {k: tuple(v.shape) for k, v in module.state_dict().items()}


@pytest.mark.parametrize("config", CONFIGS, ids=["mha", "gqa-bias", "mqa"])
def test_state_names_are_the_course_modules(config):
    assert C.block_shapes(config) == _shapes(Block(config))
    course = _shapes(GPT(config))
    assert course.pop("lm_head.weight") == (config.vocab_size, config.n_embd)
    assert C.gpt_shapes(config) == course


def test_a_shipped_checkpoint_loads_by_the_same_names():
    ckpt = load_checkpoint(ROOT / "checkpoints" / "ch13_mha.pt", verify_corpus=False)
    stored = torch.load(ROOT / "checkpoints" / "ch13_mha.pt", weights_only=True)["state_dict"]
    assert C.gpt_shapes(ckpt.config) == {k: tuple(v.shape) for k, v in stored.items()}
    fresh = GPT(ckpt.config).eval()
    assert C.load_state(fresh, {k: v.float() for k, v in stored.items()})
    ids = torch.randint(
        0, ckpt.config.vocab_size, (2, 64), generator=torch.Generator().manual_seed(0)
    )
    with torch.no_grad():
        torch.testing.assert_close(fresh(ids), ckpt.model(ids), rtol=0, atol=0)


def test_load_state_refuses_other_names_and_zeroes_an_untied_read_out():
    c = CONFIGS[0]
    state = C.seeded_state(C.gpt_shapes(c), 3)
    assert not C.load_state(Block(c), state)
    untied = GPT(c)
    untied.lm_head.weight = torch.nn.Parameter(torch.randn(c.vocab_size, c.n_embd))
    assert C.load_state(untied, state)
    assert not untied.lm_head.weight.any() and untied.wte.weight.any()


def test_variants_with_no_switch_are_the_course_forward():
    for item in C.ITEMS:
        for case in item.cases(5):
            if item.id == "ex13_block":
                args = [torch.from_numpy(v) if hasattr(v, "shape") else v for v in case.values()]
                block = C._course_block(*args)
                with torch.no_grad():
                    torch.testing.assert_close(C.block_variant(block, args[-1]), block(args[-1]))
            else:
                sizes = [
                    case[k]
                    for k in (
                        "seed",
                        "vocab_size",
                        "context_length",
                        "n_layer",
                        "n_head",
                        "n_kv_head",
                        "n_embd",
                        "bias",
                    )
                ]
                model, ids = C.course_gpt(*sizes), torch.from_numpy(case["ids"])
                with torch.no_grad():
                    torch.testing.assert_close(C.gpt_variant(model, ids), model(ids))


def test_schedule_is_the_recipe_and_each_mistake_moves_it():
    tc = TrainConfig(
        max_iters=20, warmup_iters=5, lr_decay_iters=15, learning_rate=1e-3, min_lr=1e-4
    )
    steps = range(20)
    assert [T.schedule(s, tc) for s in steps] == [learning_rate(s, tc) for s in steps]
    off = [s for s in steps if T.schedule(s, tc, "warmup_off_by_one") != learning_rate(s, tc)]
    assert off == [0, 1, 2, 3, 4]  # the warm-up only
    off = [s for s in steps if T.schedule(s, tc, "cosine_from_0") != learning_rate(s, tc)]
    assert off == list(range(5, 15))  # the cosine only


def test_recipe_steps_reproduce_mha_course_train():
    """The reference against the real loop: 6 steps of ``train`` on the corpus (tiny model)."""
    cfg = GPTConfig(context_length=8, n_layer=1, n_head=2, n_embd=16)
    tc = TrainConfig(
        batch_size=3,
        max_iters=6,
        warmup_iters=2,
        learning_rate=3e-3,
        min_lr=3e-4,
        grad_clip=0.2,
        eval_interval=1000,
        eval_windows=1,
        final_eval_windows=1,
    )
    _, meta = train(cfg, tc, "unused.pt", save=False, progress=False)
    torch.manual_seed(tc.seed)  # train()'s initial weights
    model = GPT(cfg).train()
    corpus = load_corpus()
    data = CharTokenizer.from_text(corpus.text).encode(corpus.train)
    batches = [
        training_batch(data, cfg.context_length, tc.batch_size, tc.seed, s) for s in range(6)
    ]
    losses, lrs = T.recipe_steps(
        model, tc, torch.stack([b[0] for b in batches]), torch.stack([b[1] for b in batches]), 0
    )
    torch.testing.assert_close(
        losses, torch.tensor(meta["history"]["train_loss"]), rtol=0, atol=1e-5
    )
    assert lrs.tolist() == [learning_rate(s, tc) for s in range(6)]


def test_clipping_acts_in_every_training_case():
    """The "no clipping" mistake is visible only where the gradient norm exceeds grad_clip."""
    for case in T.ITEMS[0].cases(9):
        model, tc = T._train_setup(*[case[k] for k in list(case)[:12]], case["xs"].shape[-1])
        loss = torch.nn.functional.cross_entropy(
            model(torch.from_numpy(case["xs"][0])).flatten(0, 1),
            torch.from_numpy(case["ys"][0]).flatten(),
        )
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), float("inf"))
        assert norm > 2 * tc.grad_clip, (float(norm), tc.grad_clip)
