"""Training of the demo model: windows of the tokenized text, AdamW with warm-up and cosine
decay, a checkpoint to resume from, and a log line of the loss as it goes.

A window is BOS followed by the tokens from the start of a random verse (crossing verse and
chapter ends), so a prompt that starts a verse after BOS is what the model saw. Step s draws
its windows from a generator seeded by (seed, s): a resumed run draws the same batches.
The schedule runs over `steps`, or, with a time budget, over the wall-clock minutes (the
step count then depends on the machine). The weights kept are those of the lowest held-out
loss seen at an evaluation."""
import copy
import math
import os
import time
from contextlib import nullcontext
from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F

from llama import LlamaForCausalLM, LlamaShape


@dataclass
class TrainConfig:
    steps: int
    minutes: float = 0.0  # > 0: a wall-clock budget, and the schedule runs over it
    batch: int = 8
    context: int = 256
    peak_lr: float = 2e-3
    final_lr_fraction: float = 0.1
    warmup_steps: int = 100
    weight_decay: float = 0.1
    dropout: float = 0.0
    grad_clip: float = 1.0
    seed: int = 1611
    log_every: int = 20
    eval_every: int = 250
    checkpoint_every: int = 100


@dataclass
class TokenText:
    """A token stream and the offsets in it where verses start."""
    tokens: torch.Tensor  # int64 [N], on the device that trains
    verse_starts: torch.Tensor  # int64 [V], on the CPU (the generator's draws)

    def to(self, device):
        return TokenText(self.tokens.to(device), self.verse_starts)

    def windows(self, bos_id, context, count, generator):
        """count windows [count, context + 1] on the tokens' device: BOS and the next
        `context` tokens of random verses."""
        usable = self.verse_starts[self.verse_starts + context <= len(self.tokens)]
        picks = usable[torch.randint(len(usable), (count,), generator=generator)]
        rows = self.tokens[(picks[:, None] + torch.arange(context)).to(self.tokens.device)]
        bos = torch.full((count, 1), bos_id, dtype=rows.dtype, device=rows.device)
        return torch.cat([bos, rows], dim=1)


def learning_rate(config: TrainConfig, step, progress):
    """Linear warm-up over warmup_steps, then cosine from peak_lr to final_lr_fraction of it
    as progress (the fraction of steps or of the time budget done) goes from 0 to 1."""
    if step < config.warmup_steps:
        return config.peak_lr * (step + 1) / config.warmup_steps
    floor = config.final_lr_fraction
    return config.peak_lr * (floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * min(1.0, progress))))


def loss_of(model, windows):
    logits = model(windows[:, :-1])
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), windows[:, 1:].reshape(-1))


def make_optimizer(model, config: TrainConfig, device):
    matrices = [p for n, p in model.named_parameters() if p.dim() >= 2]
    vectors = [p for n, p in model.named_parameters() if p.dim() < 2]
    fused = {"fused": True} if device.type == "cuda" else {}
    return torch.optim.AdamW([{"params": matrices, "weight_decay": config.weight_decay},
                              {"params": vectors, "weight_decay": 0.0}], lr=config.peak_lr, betas=(0.9, 0.95),
                             **fused)


def save_checkpoint(path, model, best, optimizer, step, elapsed, shape, config):
    tmp = path.with_suffix(".tmp")
    torch.save({"step": step, "elapsed": elapsed, "model": model.state_dict(), "best": best,
                "optimizer": optimizer.state_dict(), "shape": shape.as_dict(), "config": asdict(config)}, tmp)
    os.replace(tmp, path)


def autocast(device, precision):
    if precision == "bf16":
        return torch.autocast(device_type=device.type, dtype=torch.bfloat16)
    return nullcontext()


@torch.no_grad()
def evaluate(model, windows, chunk=8, precision="fp32"):
    model.eval()
    device = next(model.parameters()).device
    losses = []
    for i in range(0, len(windows), chunk):
        with autocast(device, precision):
            losses.append(float(loss_of(model, windows[i:i + chunk].to(device))))
    model.train()
    return sum(losses) / len(losses)


def train(shape: LlamaShape, config: TrainConfig, train_text: TokenText, val_text: TokenText, bos_id,
          checkpoint_path, log, device=torch.device("cpu"), precision="fp32"):
    """Trains to config.steps (or config.minutes), resuming from checkpoint_path when it
    exists; returns the model (on the CPU, fp32) with the best held-out weights, and the
    held-out windows."""
    model = LlamaForCausalLM(shape, config.dropout)
    model.init_weights(torch.Generator().manual_seed(config.seed))
    model.to(device)
    optimizer = make_optimizer(model, config, device)
    step, elapsed, best = 0, 0.0, None
    if checkpoint_path.exists():
        state = torch.load(checkpoint_path, map_location=device)
        if state["shape"] != shape.as_dict() or state["config"] != asdict(config):
            raise SystemExit(f"{checkpoint_path} was made with another shape or config: "
                             f"{state['shape']} {state['config']}; remove it (or use --fresh) to start over")
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        step, elapsed, best = state["step"], state["elapsed"], state["best"]
        log(f"resumed at step {step} from {checkpoint_path}")
    else:
        log(f"model: {model.parameter_count()} parameters, {shape.as_dict()}")
        log(f"training on {device} ({precision}): {asdict(config)}; {len(train_text.tokens)} training tokens, "
            f"{len(val_text.tokens)} held out")
    val_windows = val_text.windows(bos_id, config.context, 64, torch.Generator().manual_seed(config.seed + 1))
    on_device = train_text.to(device)
    eval_chunk = 64 if device.type == "cuda" else 8

    def progress():
        return elapsed / (60 * config.minutes) if config.minutes > 0 else step / config.steps

    def check_held_out():
        nonlocal best
        loss = evaluate(model, val_windows, eval_chunk, precision)
        kept = best is None or loss < best["loss"]
        if kept:
            best = {"loss": loss, "step": step, "model": copy.deepcopy(model.state_dict())}
        log(f"step {step} held-out loss {loss:.4f}" + (" (best so far)" if kept else f" (best {best['loss']:.4f})"))

    model.train()
    window_loss, window_steps, window_start = torch.zeros((), device=device), 0, time.time()
    last = time.time()
    while (step < config.steps if config.minutes <= 0 else progress() < 1.0):
        generator = torch.Generator().manual_seed(config.seed * 1_000_003 + step)
        batch = on_device.windows(bos_id, config.context, config.batch, generator)
        for group in optimizer.param_groups:
            group["lr"] = learning_rate(config, step, progress())
        with autocast(device, precision):
            loss = loss_of(model, batch)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), config.grad_clip)
        optimizer.step()
        step += 1
        now = time.time()
        elapsed, last = elapsed + (now - last), now
        window_loss += loss.detach()
        window_steps += 1
        if step % config.log_every == 0:
            wall = time.time() - window_start
            log(f"step {step} ({100 * min(1.0, progress()):.0f}%) loss {float(window_loss) / window_steps:.4f} "
                f"lr {optimizer.param_groups[0]['lr']:.2e} {window_steps * config.batch * config.context / wall:.0f} tok/s "
                f"({wall / window_steps:.3f} s/step)")
            window_loss, window_steps, window_start = torch.zeros((), device=device), 0, time.time()
        done = progress() >= 1.0 if config.minutes > 0 else step == config.steps
        if step % config.eval_every == 0 or done:
            check_held_out()
        if step % config.checkpoint_every == 0 or done:
            save_checkpoint(checkpoint_path, model, best, optimizer, step, elapsed, shape, config)
        last = time.time()  # evaluations and checkpoints are outside the budget
    if best is None:
        check_held_out()
    log(f"kept the weights of step {best['step']} (held-out loss {best['loss']:.4f}) of {step} steps")
    model.load_state_dict(best["model"])
    model.to("cpu").float().eval()
    return model, val_windows

