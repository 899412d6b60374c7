"""What the hand-written autograd Functions of packlm/model/fused.py buy in a whole step.

    python bench/fused.py [--rounds 16] [--bf16] [--threads 1]   # CPU: minutes

One training step (forward, loss as LitCausalLM takes it: `loss.head_cross_entropy`,
backward, clip 1.0, fused AdamW) of packlm's Transformer, eager, at two shapes: the default
config (2 x 128, 4 heads, vocab 4096, 32 rows of 128 tokens: the chunked head's 4096 x 4096
logits) and experiment=shakespeare (2 x 192, 6 heads, vocab 1536, 32 x 64). A contender of
`PLAIN` puts one Function back to the plain torch it replaces (the chunked head: logits +
F.cross_entropy); "fused" is the tree as it is, "fused again" the same code once more (the
noise floor of the run). Float32 (what trainer.precision=auto takes on a CPU); --bf16 under
bf16 autocast (trainer.precision=bf16-mixed). Glibc's malloc thresholds as train.py leaves
them by default.

After two warm-up steps each, the contenders take turns, one step each per round on the same
batch, in A B ... B A order every other round; a ratio is the median over rounds of that
round's plain / fused step time (> 1: the Function saves time), so a busy spell of a shared
machine hits both sides alike. Both the process's CPU time (the steadier figure on a busy
machine, with --threads 1) and wall time are given, with every round's raw figure.

A Function stays only where it is worth at least 10% of the step. Measured at commit 380989e
(AMD EPYC, 2 cores shared with four other jobs, load 6-10; --threads 1 --rounds 16, float32),
plain / fused, CPU time (wall): default config: F.rms_norm 1.030 (1.008), split + rotate_half
heads 1.038 (1.027), chunk + silu SwiGLU 0.980 (1.020), the chunked head 1.135 (1.154), all
four 1.163 (1.255); Shakespeare (not chunked there: its "chunked head" row ran the same code,
0.921 (1.021), the noise): 0.974 (0.984), 1.021 (1.029), 0.966 (0.987), all 1.034 (1.145).
--bf16 at the default config (10 rounds; this CPU has no AVX-512, so bf16 ran 10x slower than
float32: 7.3 s a step against 0.73): 0.985, 0.962, 0.957, 1.008, all 0.991, within the noise.
So the RMSNorm, heads and SwiGLU Functions went for torch's ops; the chunked head stayed.
"""

from __future__ import annotations

import argparse
import statistics
import time
from contextlib import contextmanager

import torch

from model import packed_batch  # bench/model.py: random packed rows
from packlm.config.model import ModelConfig
from packlm.model import fused
from packlm.model.loss import head_cross_entropy
from packlm.model.transformer import Transformer

SHAPES = {
    "default": (dict(vocab_size=4096, context_length=128, n_layer=2, n_head=4, n_embd=128), 32),
    "shakespeare": (dict(vocab_size=1536, context_length=64, n_layer=2, n_head=6, n_embd=192), 32),
}  # fmt: skip
"""Name: (ModelConfig keywords, batch rows); a row is context_length tokens."""


PLAIN = {  # contender: (the name in fused, its plain replacement)
    "chunked head": ("CE_CHUNKED_FROM", 2**62),  # never chunked: logits + F.cross_entropy
}
CONTENDERS = {"fused": (), "fused again": (), **{name: (name,) for name in PLAIN}}


@contextmanager
def plain(names: tuple[str, ...]):
    """fused.<name> replaced by its plain torch form for the duration."""
    saved = {PLAIN[name][0]: getattr(fused, PLAIN[name][0]) for name in names}
    for name in names:
        setattr(fused, *PLAIN[name])
    try:
        yield
    finally:
        for name, value in saved.items():
            setattr(fused, name, value)


class Step:
    """One model and optimizer per contender, built once and trained on round after round."""

    def __init__(self, config: dict, names: tuple[str, ...], bf16: bool):
        torch.manual_seed(0)
        self.model = Transformer(ModelConfig(**config))
        self.params = list(self.model.parameters())
        self.opt = torch.optim.AdamW(self.params, lr=1e-3, fused=True)
        self.names, self.bf16 = names, bf16

    def __call__(self, batch: dict[str, torch.Tensor]) -> None:
        inputs = (batch["input_ids"], batch["segment_ids"], batch["position_ids"])
        with plain(self.names), torch.autocast("cpu", torch.bfloat16, enabled=self.bf16):
            objective, _ = head_cross_entropy(self.model, self.model, inputs, batch["labels"])
            loss = objective / (batch["labels"] != -100).sum()
        loss.backward()  # through the Functions (or not) that the forward recorded
        torch.nn.utils.clip_grad_norm_(self.params, 1.0)
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)

    def timed(self, batch: dict[str, torch.Tensor]) -> tuple[float, float]:
        """(wall, this process's CPU) milliseconds of one step."""
        wall, cpu = time.perf_counter(), time.process_time()
        self(batch)
        return 1e3 * (time.perf_counter() - wall), 1e3 * (time.process_time() - cpu)


def table(ms: dict[str, list[float]], what: str) -> None:
    print(f"| {'plain form of':<13} | {what + ' ms':>10} | {'plain/fused':>11} | each round (ms)")
    print(f"|{'-' * 15}|{'-' * 11}:|{'-' * 12}:|{'-' * 16}")
    for name, times in ms.items():
        ratio = statistics.median(a / b for a, b in zip(times, ms["fused"], strict=True))
        raw = " ".join(f"{t:.0f}" for t in times)
        print(f"| {name:<13} | {statistics.median(times):>10.1f} | {ratio:>11.3f} | {raw}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=16, help="timed steps per contender")
    parser.add_argument("--bf16", action="store_true", help="under bf16 autocast")
    parser.add_argument("--shapes", nargs="+", default=list(SHAPES), choices=list(SHAPES))
    parser.add_argument(
        "--threads", type=int, default=torch.get_num_threads(),
        help="torch's intra-op threads (1 on a busy shared machine: two threads waiting on each "
        "other's share of every kernel made steps up to 10x slower there)",
    )  # fmt: skip
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    warmup = 2
    print(f"{torch.get_num_threads()} threads, {'bf16-mixed' if args.bf16 else 'float32'}")
    for shape in args.shapes:
        config, rows = SHAPES[shape]
        T, V = config["context_length"], config["vocab_size"]
        batches = [packed_batch(rows, T, 3, V, seed=i) for i in range(warmup + args.rounds)]
        steps = {name: Step(config, names, args.bf16) for name, names in CONTENDERS.items()}
        for step in steps.values():
            for batch in batches[:warmup]:
                step(batch)
        order = list(steps)
        wall: dict[str, list[float]] = {name: [] for name in steps}
        cpu: dict[str, list[float]] = {name: [] for name in steps}
        for i, batch in enumerate(batches[warmup:]):
            for name in order if i % 2 == 0 else order[::-1]:
                w, c = steps[name].timed(batch)
                wall[name].append(w)
                cpu[name].append(c)
        chunked = rows * T * V >= fused.CE_CHUNKED_FROM
        print(f"\n{shape}: {config}, {rows} x {T} tokens; chunked head by default: {chunked}")
        table(cpu, "CPU")
        table(wall, "wall")


if __name__ == "__main__":
    main()
