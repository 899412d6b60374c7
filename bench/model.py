"""Model benchmarks: what Lightning and the block-diagonal mask cost, as ratios.

    python bench/model.py            # CPU: about 1.5 minutes on 2 cores
    python bench/model.py --quick    # fewer steps, noisier

1. Training-step tokens/s of LitCausalLM inside a Trainer vs the same model in a bare
   PyTorch loop doing the same math (sum CE / supervised, clip, AdamW, schedule).
2. Forward + backward with block-diagonal SDPA (4 documents per row) vs is_causal SDPA
   (stream rows), with the additive float mask the model uses and with a bool mask.
3. On CUDA only: FlexAttention (compiled, BlockMask) vs dense-mask SDPA vs is_causal at
   context 2048 with many short documents, attention forward + backward.
A step's time is the wall time between consecutive step ends (data fetch included); the
table uses the median over all steps of all repeats, the contenders taking turns so a
busy neighbour on a shared machine hits them alike.
"""

from __future__ import annotations

import argparse
import logging
import statistics
import tempfile
import time
import warnings
from contextlib import contextmanager, nullcontext
from functools import partial

import lightning as L
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader

from packlm.callbacks import StepMetrics
from packlm.model import masks
from packlm.model.config import ModelConfig
from packlm.model.lit_module import LitCausalLM, lr_factor
from packlm.model.transformer import Transformer, positions_from_segments

CONFIG = dict(vocab_size=65, context_length=64, n_layer=4, n_head=4, n_embd=128)
B, T = 12, 64


def packed_batch(
    B: int, T: int, docs_per_row: int, vocab: int, seed: int
) -> dict[str, torch.Tensor]:
    """Rows of `docs_per_row` documents of random lengths, document-mode labels, no PAD."""
    g = torch.Generator().manual_seed(seed)
    seg = torch.zeros(B, T, dtype=torch.int32)
    for b in range(B):
        for cut in torch.randperm(T - 1, generator=g)[: docs_per_row - 1] + 1:
            seg[b, cut:] += 1
    labels = torch.randint(0, vocab, (B, T), generator=g)
    labels[:, :-1][seg[:, 1:] != seg[:, :-1]] = -100  # no target across a document end
    labels[:, -1] = -100
    return {
        "input_ids": torch.randint(0, vocab, (B, T), generator=g),
        "labels": labels,
        "segment_ids": seg,
        "position_ids": positions_from_segments(seg, B, T, "cpu"),
    }


def as_stream(batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    B, T = batch["input_ids"].shape
    zeros = torch.zeros(B, T, dtype=torch.int32)
    return dict(batch, segment_ids=zeros, position_ids=positions_from_segments(None, B, T, "cpu"))


def gaps(stamps: list[float], warmup: int) -> list[float]:
    return [b - a for a, b in zip(stamps[warmup:], stamps[warmup + 1 :], strict=False)]


# --- 1. Lightning vs bare loop ----------------------------------------------------------------


def bare_loop(batches, warmup: int) -> list[float]:
    torch.manual_seed(0)
    model = Transformer(ModelConfig(**CONFIG))
    params = list(model.parameters())
    opt = torch.optim.AdamW(
        [{"params": [p for p in params if p.dim() >= 2], "weight_decay": 0.1},
         {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}],
        lr=3e-3, betas=(0.9, 0.95),
    )  # fmt: skip
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, partial(lr_factor, warmup=10, total=1000, min_ratio=0.1)
    )
    stamps = []
    for batch in DataLoader(batches, batch_size=None):
        logits = model(batch["input_ids"], batch["segment_ids"], batch["position_ids"])
        labels = batch["labels"]
        loss = (
            F.cross_entropy(logits.flatten(0, 1), labels.flatten(), reduction="sum")
            / (labels != -100).sum()
        )
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
        stamps.append(time.perf_counter())
    return gaps(stamps, warmup)


class StepStamps(L.Callback):
    def __init__(self):
        self.stamps = []

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        self.stamps.append(time.perf_counter())


def lightning_loop(batches, warmup: int, tensorboard: bool) -> list[float]:
    torch.manual_seed(0)
    lit = LitCausalLM(CONFIG, {"lr": 3e-3, "warmup_steps": 10, "max_steps": 1000})
    stamps = StepStamps()
    with tempfile.TemporaryDirectory() as tmp:
        logger = L.pytorch.loggers.TensorBoardLogger(tmp) if tensorboard else False
        trainer = L.Trainer(
            accelerator="cpu", devices=1, max_steps=len(batches), gradient_clip_val=1.0,
            logger=logger, log_every_n_steps=10, enable_checkpointing=False,
            enable_progress_bar=False, enable_model_summary=False, callbacks=[StepMetrics(), stamps],
        )  # fmt: skip
        trainer.fit(lit, DataLoader(batches, batch_size=None))
    return gaps(stamps.stamps, warmup)


# --- 2. block-diagonal vs causal on CPU -------------------------------------------------------


@contextmanager
def bool_masks():
    """Swap the additive float mask for SDPA's bool form (converted inside every call)."""
    original = masks.additive_mask
    masks.additive_mask = lambda seg, dtype: masks.allowed(seg)[:, None]
    try:
        yield
    finally:
        masks.additive_mask = original


def forward_backward(batches, warmup: int, config: dict, bool_mask: bool = False) -> list[float]:
    """Forward + backward of the bare model, no optimizer: isolates what attention costs."""
    torch.manual_seed(0)
    model = Transformer(ModelConfig(**config))
    stamps = []
    with bool_masks() if bool_mask else nullcontext():
        for batch in batches:
            logits = model(batch["input_ids"], batch["segment_ids"], batch["position_ids"])
            F.cross_entropy(
                logits.flatten(0, 1), batch["labels"].flatten(), reduction="sum"
            ).backward()
            stamps.append(time.perf_counter())
    return gaps(stamps, warmup)


# --- 3. FlexAttention on CUDA -----------------------------------------------------------------


def cuda_ms(fn, n: int = 20) -> float:
    fn()  # compile / warm up
    torch.cuda.synchronize()
    times = []
    for _ in range(n):
        start = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return 1e3 * statistics.median(times)


def cuda_rows() -> list[tuple[str, float]]:
    Bc, H, Tc, D = 4, 8, 2048, 64
    seg = packed_batch(Bc, Tc, docs_per_row=24, vocab=2, seed=0)[
        "segment_ids"
    ].cuda()  # ~85 tokens/doc
    q, k, v = (
        torch.randn(Bc, H, Tc, D, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        for _ in range(3)
    )

    def step(build) -> None:
        masks.attend(q, k, v, build()).sum().backward()  # mask built inside: its cost counts

    causal = cuda_ms(partial(step, lambda: masks.AttentionMask(is_causal=True)))
    dense = cuda_ms(partial(step, partial(masks.build_mask, seg, "sdpa", torch.bfloat16)))
    flex = cuda_ms(partial(step, partial(masks.build_mask, seg, "flex", torch.bfloat16)))
    block = cuda_ms(partial(masks.build_mask, seg, "flex", torch.bfloat16))
    return [
        ("CUDA T=2048, 24 docs/row, attn fwd+bwd: dense-mask SDPA / Flex (time)", dense / flex),
        ("CUDA T=2048: Flex / is_causal SDPA (time)", flex / causal),
        ("CUDA T=2048: Flex fwd+bwd incl. BlockMask, ms", flex),
        ("CUDA T=2048: BlockMask build alone, ms", block),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--steps", type=int, default=40, help="timed steps per run (T=64)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="--steps 15 --repeats 2")
    args = parser.parse_args()
    if args.quick:
        args.steps, args.repeats = 15, 2
    warnings.filterwarnings("ignore")
    logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
    warmup = 5
    packed = [packed_batch(B, T, 4, 65, seed=i) for i in range(warmup + args.steps + 1)]
    long_config = dict(CONFIG, context_length=256)
    n_long = warmup + max(4, args.steps // 4) + 1
    long_packed = [packed_batch(B, 256, 4, 65, seed=i) for i in range(n_long)]

    contenders = {
        "bare": lambda: bare_loop(packed, warmup),
        "lightning": lambda: lightning_loop(packed, warmup, tensorboard=False),
        "lightning+tb": lambda: lightning_loop(packed, warmup, tensorboard=True),
        "causal": lambda: forward_backward([as_stream(b) for b in packed], warmup, CONFIG),
        "float": lambda: forward_backward(packed, warmup, CONFIG),
        "bool": lambda: forward_backward(packed, warmup, CONFIG, bool_mask=True),
        "causal256": lambda: forward_backward(
            [as_stream(b) for b in long_packed], warmup, long_config
        ),
        "float256": lambda: forward_backward(long_packed, warmup, long_config),
        "bool256": lambda: forward_backward(long_packed, warmup, long_config, bool_mask=True),
    }
    steps: dict[str, list[float]] = {name: [] for name in contenders}
    for _ in range(args.repeats):
        for name, run in contenders.items():
            steps[name] += run()
    ms = {name: 1e3 * statistics.median(s) for name, s in steps.items()}

    rows = [
        ("bare loop: ms/step", ms["bare"]),
        ("bare loop: tokens/s", B * T / ms["bare"] * 1e3),
        ("Lightning (no logger): tokens/s", B * T / ms["lightning"] * 1e3),
        ("Lightning / bare (time; aim <= 1.05)", ms["lightning"] / ms["bare"]),
        ("Lightning + TensorBoard (every 10 steps) / bare (time)", ms["lightning+tb"] / ms["bare"]),
        (
            "T=64 fwd+bwd: block-diag float mask / is_causal (aim <= 1.1)",
            ms["float"] / ms["causal"],
        ),
        ("T=64 fwd+bwd: block-diag bool mask / is_causal", ms["bool"] / ms["causal"]),
        ("T=256 fwd+bwd: block-diag float mask / is_causal", ms["float256"] / ms["causal256"]),
        ("T=256 fwd+bwd: block-diag bool mask / is_causal", ms["bool256"] / ms["causal256"]),
    ]
    if torch.cuda.is_available():
        rows += cuda_rows()
    print(
        f"\nmodel {CONFIG}, batch {B}x{T}, 4 documents per row, {torch.get_num_threads()} threads"
    )
    print(f"median step time over {args.repeats} repeats; ratios of times: > 1 means slower\n")
    print(f"| {'measure':<62} | {'value':>9} |\n|{'-' * 64}|{'-' * 10}:|")
    for name, value in rows:
        print(
            f"| {name:<62} | {value:>9.3f} |" if value < 100 else f"| {name:<62} | {value:>9.0f} |"
        )


if __name__ == "__main__":
    main()
