"""ex13: the cosine's progress counted from step 0, not from the end of the warm-up."""
NOTEBOOK = "ex13"
REPLACE = {"ex13_train_steps": '''
def train_steps(model: nn.Module, tc: TrainConfig, xs: torch.Tensor, ys: torch.Tensor,
                start: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Steps start .. start + n - 1 of the recipe on one fresh AdamW.

    Shape:
        xs, ys: (n, B, T) int64. Returns losses (n,) and learning rates (n,).
    """
    def lr_at(step: int) -> float:
        decay = tc.lr_decay_iters or tc.max_iters
        if step < tc.warmup_iters:
            return tc.learning_rate * (step + 1) / (tc.warmup_iters + 1)
        if step >= decay:
            return tc.min_lr
        progress = step / decay
        return tc.min_lr + 0.5 * (1.0 + math.cos(math.pi * progress)) * (tc.learning_rate - tc.min_lr)

    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW([{"params": [p for p in params if p.dim() >= 2], "weight_decay": tc.weight_decay},
                             {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}],
                            lr=tc.learning_rate, betas=(tc.beta1, tc.beta2))
    losses, lrs = [], []
    for i in range(xs.shape[0]):
        lr = lr_at(start + i)
        for group in opt.param_groups:
            group["lr"] = lr
        logits = model(xs[i])  # (B, T) -> (B, T, V)
        loss = F.cross_entropy(logits.flatten(0, 1), ys[i].flatten())  # (B*T, V) vs (B*T,)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), tc.grad_clip)
        opt.step()
        losses.append(loss.detach())
        lrs.append(lr)
    return torch.stack(losses), torch.tensor(lrs, dtype=torch.float64)
'''}
EXPECT = {'ex13_train_steps': ('wrong values', 'schedule off by the warm-up')}
