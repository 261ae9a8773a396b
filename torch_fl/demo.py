"""Train a small transformer on `flagos` and on plain CPU, and compare the losses.

    python -m torch_fl.demo [--steps N] [--device-index I]

The task is sequence reversal: the model reads a random token sequence and predicts it back to
front, so the loss falls visibly within a few hundred steps. Both runs start from the same
weights and see the same batches; the flagos run goes through the whole device stack (factory
ops, the operator routes, autograd, the optimizer's foreach kernels, device-to-host copies), and
its losses must match the CPU run's within a small tolerance. The exit status is 0 when they do.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from dataclasses import dataclass

import torch
from torch import nn

import torch_fl

VOCAB = 16
SEQ_LEN = 12
BATCH = 32


class TinyTransformer(nn.Module):
    """Token and position embeddings, a pre-norm transformer encoder, a linear head."""

    def __init__(self, d_model: int = 64, nhead: int = 4, layers: int = 2) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, d_model)
        self.pos = nn.Parameter(torch.randn(SEQ_LEN, d_model))
        layer = nn.TransformerEncoderLayer(
            d_model,
            nhead,
            dim_feedforward=4 * d_model,
            dropout=0.0,  # no dropout: both runs must do the same arithmetic
            batch_first=True,
            norm_first=True,
        )
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, VOCAB)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        h = self.embed(tokens) + self.pos
        return self.head(self.norm(self.encoder(h)))


@dataclass
class Run:
    device: str
    losses: dict[int, float]  # step -> loss, at the logged steps
    accuracy: float  # token accuracy on a held-out batch after training
    seconds: float


def make_batches(steps: int, seed: int) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return [torch.randint(VOCAB, (BATCH, SEQ_LEN), generator=gen) for _ in range(steps + 1)]


def train(
    device: str, batches: list[torch.Tensor], seed: int, log_every: int, progress: bool
) -> Run:
    """Trains from the seed's initial weights on `device`; the last batch is held out."""
    from tqdm import tqdm

    torch.manual_seed(seed)
    model = TinyTransformer().to(device)  # built on the CPU, so both runs start identical
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
    loss_fn = nn.CrossEntropyLoss()
    steps = len(batches) - 1
    losses: dict[int, float] = {}
    start = time.perf_counter()
    bar = tqdm(range(1, steps + 1), desc=f"{device:>8}", disable=not progress, leave=True)
    for step in bar:
        tokens = batches[step - 1].to(device)
        target = tokens.flip(1)
        logits = model(tokens)
        loss = loss_fn(logits.reshape(-1, VOCAB), target.reshape(-1))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        if step % log_every == 0 or step == 1 or step == steps:
            losses[step] = loss.item()
            bar.set_postfix(loss=f"{losses[step]:.4f}")
    with torch.no_grad():
        tokens = batches[-1].to(device)
        predicted = model(tokens).argmax(-1)
        accuracy = (predicted == tokens.flip(1)).float().mean().item()
    return Run(device, losses, accuracy, time.perf_counter() - start)


def run_both(
    steps: int, device_index: int = 0, seed: int = 0, log_every: int = 20, progress: bool = True
) -> tuple[Run, Run]:
    """The same training run on flagos:<device_index> and on the CPU."""
    batches = make_batches(steps, seed)
    flagos = train(f"flagos:{device_index}", batches, seed, log_every, progress)
    cpu = train("cpu", batches, seed, log_every, progress)
    return flagos, cpu


def compare(flagos: Run, cpu: Run, rel_tol: float, abs_tol: float) -> bool:
    return flagos.losses.keys() == cpu.losses.keys() and all(
        math.isclose(flagos.losses[s], cpu.losses[s], rel_tol=rel_tol, abs_tol=abs_tol)
        for s in flagos.losses
    )


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m torch_fl.demo",
        description="Train a small transformer on flagos and on CPU; compare the losses.",
    )
    parser.add_argument("--steps", type=int, default=200, help="training steps (default 200)")
    parser.add_argument(
        "--device-index", type=int, default=0, help="which flagos device to use (default 0)"
    )
    parser.add_argument("--log-every", type=int, default=20, help="log the loss every N steps")
    parser.add_argument("--seed", type=int, default=0, help="seed of weights and data")
    parser.add_argument("--rtol", type=float, default=1e-3, help="relative loss tolerance")
    parser.add_argument("--atol", type=float, default=1e-5, help="absolute loss tolerance")
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bars")
    args = parser.parse_args(argv)
    if args.steps < 1:
        parser.error("--steps must be at least 1")
    if args.log_every < 1:
        parser.error("--log-every must be at least 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    count = torch.flagos.device_count()
    if not 0 <= args.device_index < count:
        print(
            f"--device-index {args.device_index} is out of range: this process has {count} "
            f"flagos device(s) (accelerator {torch_fl.build_config.ACCELERATOR})",
            file=sys.stderr,
        )
        return 2
    device = f"flagos:{args.device_index}"
    print(
        f"torch {torch.__version__}, torch_fl {torch_fl.__version__}, "
        f"accelerator {torch_fl.build_config.ACCELERATOR}: training on {device} and on cpu "
        f"({args.steps} steps, batch {BATCH}, task: reverse {SEQ_LEN} tokens)"
    )
    flagos, cpu = run_both(
        args.steps, args.device_index, args.seed, args.log_every, not args.no_progress
    )

    print(f"\n{'step':>6}  {device + ' loss':>14}  {'cpu loss':>10}  {'|diff|':>9}")
    for step in flagos.losses:
        a, b = flagos.losses[step], cpu.losses.get(step, float("nan"))
        print(f"{step:>6}  {a:>14.6f}  {b:>10.6f}  {abs(a - b):>9.2e}")
    print(
        f"\nheld-out token accuracy: {device} {flagos.accuracy:.3f}, cpu {cpu.accuracy:.3f}; "
        f"time: {device} {flagos.seconds:.1f} s, cpu {cpu.seconds:.1f} s"
    )
    agree = compare(flagos, cpu, args.rtol, args.atol)
    if agree:
        print(f"PASS: {device} and cpu losses agree (rtol {args.rtol:g}, atol {args.atol:g})")
        return 0
    print(f"FAIL: {device} and cpu losses differ beyond rtol {args.rtol:g}, atol {args.atol:g}")
    return 1


if __name__ == "__main__":
    sys.exit(main())
