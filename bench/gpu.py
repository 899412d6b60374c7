"""GPU benchmarks: FlexAttention vs dense-mask SDPA vs is_causal SDPA, and model.compile.

    python bench/gpu.py              # needs CUDA; about 3 minutes on one GPU (compiles)
    python bench/gpu.py --dry-run    # no GPU: the same code paths, tiny, on the CPU

1. Attention forward + backward at T=2048 with many short documents (24 per row, about 85
   tokens each), bf16: FlexAttention (compiled, BlockMask from segment ids) against SDPA
   with the additive [B, 1, T, T] mask and against is_causal SDPA (no mask: the floor).
   Each mask is built inside the timed step, once per batch as in the model
   (packlm.model.masks.build_mask), and the BlockMask build is also timed alone.
2. A training step (forward + backward + AdamW, bf16 autocast) of packlm's Transformer on
   the same packed rows: eager with FlexAttention (model.attention=auto on CUDA), eager with
   dense-mask SDPA, and torch.compile'd with FlexAttention (what model.compile=true runs).
3. `--strategies`: `python train.py` with trainer.strategy=ddp and then fsdp on every visible
   GPU, the same run otherwise (model=medium, 60 steps, bf16-mixed): supervised tokens/s
   from each run's summary and the final val/loss, which should agree to bf16's precision
   (FSDP shards parameters, it does not change the math). The dry run trains DDP on two CPU
   processes (gloo) and says FSDP needs CUDA.
Contenders take turns (interleaved repeats); the table gives medians and ratios of times.
Without CUDA (and without --dry-run) it says so and exits 0.
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

import torch
import torch.nn.functional as F

from packlm.config.model import ModelConfig
from packlm.model import masks
from packlm.model.transformer import Transformer, positions_from_segments


def segments(B: int, T: int, docs_per_row: int, seed: int, device) -> torch.Tensor:
    """[B, T] int32 segment ids: each row cut into `docs_per_row` documents at random points."""
    g = torch.Generator().manual_seed(seed)
    cuts = torch.rand(B, T - 1, generator=g).argsort(dim=1)[:, : docs_per_row - 1] + 1  # [B, n-1]
    starts = torch.zeros(B, T, dtype=torch.int32)
    starts.scatter_(1, cuts, 1)  # 1 at every document start but the first
    return starts.cumsum(dim=1, dtype=torch.int32).to(device)  # [B, T]


def timed(fn, sync) -> float:
    start = time.perf_counter()
    fn()
    sync()
    return time.perf_counter() - start


def interleaved(contenders: dict, repeats: int, n: int, sync) -> dict[str, float]:
    """Median ms per call of each contender; one warm-up call each (compiles), then turns."""
    for fn in contenders.values():
        fn()
        sync()
    times = {name: [] for name in contenders}
    for _ in range(repeats):
        for name, fn in contenders.items():
            times[name] += [timed(fn, sync) for _ in range(n)]
    return {name: 1e3 * statistics.median(t) for name, t in times.items()}


# --- 1. attention alone -------------------------------------------------------------------------


def attention_contenders(seg: torch.Tensor, H: int, D: int, dtype, backward: bool) -> dict:
    B, T = seg.shape
    q, k, v = (
        torch.randn(B, H, T, D, device=seg.device, dtype=dtype, requires_grad=backward)
        for _ in range(3)
    )  # [B, H, T, D]

    def step(build) -> torch.Tensor:
        out = masks.attend(q, k, v, build())  # mask built inside: its cost counts
        if backward:
            out.sum().backward()
        return out

    return {
        "is_causal": partial(step, lambda: masks.AttentionMask(is_causal=True)),
        "dense": partial(step, partial(masks.build_mask, seg, "sdpa", dtype)),
        "flex": partial(step, partial(masks.build_mask, seg, "flex", dtype)),
        "blockmask": partial(masks.build_mask, seg, "flex", dtype),
    }


def check_flex_matches_dense(contenders: dict, atol: float) -> float:
    """Max |flex - dense| of one forward (the same q, k, v): the two must agree."""
    with torch.no_grad():
        diff = (contenders["flex"]() - contenders["dense"]()).abs().max().item()
    if not diff <= atol:
        raise SystemExit(f"FlexAttention and dense-mask SDPA disagree: max diff {diff:.3g}")
    return diff


# --- 2. the training step -------------------------------------------------------------------------


class TrainStep:
    """One model + AdamW on fixed packed batches; compiled or eager, flex or sdpa."""

    def __init__(self, config: ModelConfig, batches: list[dict], compile: bool, autocast):
        torch.manual_seed(0)
        device = batches[0]["input_ids"].device
        self.model = Transformer(config).to(device)
        self.run = torch.compile(self.model) if compile else self.model
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=1e-4, fused=device.type == "cuda")
        self.batches, self.i, self.autocast = batches, 0, autocast

    def __call__(self) -> None:
        batch = self.batches[self.i % len(self.batches)]
        self.i += 1
        with self.autocast():
            logits = self.run(batch["input_ids"], batch["segment_ids"], batch["position_ids"])
            loss = F.cross_entropy(logits.flatten(0, 1).float(), batch["labels"].flatten())
        loss.backward()
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)


def packed_batches(B: int, T: int, docs: int, vocab: int, n: int, device) -> list[dict]:
    out = []
    for i in range(n):
        seg = segments(B, T, docs, seed=i, device=device)  # [B, T]
        ids = torch.randint(0, vocab, (B, T), device=device)
        labels = ids.roll(-1, dims=1)
        labels[:, :-1][seg[:, 1:] != seg[:, :-1]] = -100  # no target across a document end
        labels[:, -1] = -100
        pos = positions_from_segments(seg, B, T, device)
        out.append({"input_ids": ids, "labels": labels, "segment_ids": seg, "position_ids": pos})
    return out


SUMMARY = re.compile(r"trained \d+ steps in \d+ s.*?\(([\d,]+) tokens/s\)")
VAL = re.compile(r"val/loss ([\d.]+)")


def train_with(strategy: str, overrides: list[str], run_dir: Path) -> tuple[float, float]:
    """(supervised tokens/s, final val/loss) of `python train.py` under `strategy`."""
    train_py = Path(__file__).resolve().parents[1] / "train.py"
    args = [sys.executable, str(train_py), f"trainer.strategy={strategy}", *overrides,
            f"hydra.run.dir={run_dir}"]  # fmt: skip
    out = subprocess.run(args, capture_output=True, text=True, timeout=1800)
    found, val = SUMMARY.search(out.stdout), VAL.search(out.stdout)
    if out.returncode != 0 or not found or not val:
        raise SystemExit(
            f"train.py under {strategy} failed:\n{out.stdout[-2000:]}{out.stderr[-2000:]}"
        )
    return float(found[1].replace(",", "")), float(val[1])


def strategies(dry_run: bool) -> None:
    """Part 3: DDP against FSDP through train.py, the same run otherwise."""
    if dry_run:
        names, overrides = ["ddp"], ["experiment=tiny", "trainer.accelerator=cpu",
                                     "trainer.devices=2", "trainer.max_steps=6"]  # fmt: skip
    else:
        names, devices = ["ddp", "fsdp"], torch.cuda.device_count()
        overrides = ["model=medium", "trainer.max_steps=60", "trainer.precision=bf16-mixed",
                     f"trainer.devices={devices}", "data.batch_size=16", "data.num_workers=4",
                     "train.sample_prompt=", "train.log_batch_images=false"]  # fmt: skip
    results = {}
    with tempfile.TemporaryDirectory(prefix="packlm-bench-gpu-") as tmp:
        for name in names:
            results[name] = train_with(name, overrides, Path(tmp) / name)
    print(f"\ntrain.py {' '.join(overrides)}\n")
    for name, (rate, loss) in results.items():
        print(f"  {name:<5} {rate:>12,.0f} supervised tokens/s   val/loss {loss:.4f}")
    if "fsdp" in results:
        print(f"  FSDP / DDP tokens/s: {results['fsdp'][0] / results['ddp'][0]:.3f}")
    else:
        print("  fsdp: needs CUDA GPUs (Lightning's FSDPStrategy); not run")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--dry-run", action="store_true", help="tiny sizes on the CPU, no compile")
    parser.add_argument("--strategies", action="store_true", help="part 3 only: DDP vs FSDP")
    args = parser.parse_args()
    cuda = torch.cuda.is_available()
    if not cuda and not args.dry_run:
        print("bench/gpu.py needs a CUDA GPU and none is available: nothing measured.")
        sys.exit(0)
    if args.strategies:
        strategies(args.dry_run)
        return
    if cuda and not args.dry_run:
        device, dtype, sync = torch.device("cuda"), torch.bfloat16, torch.cuda.synchronize
        B, H, T, D, docs, n = 4, 8, 2048, 64, 24, 10
        config = ModelConfig(vocab_size=8192, context_length=T, n_layer=6, n_head=8, n_embd=512)
        batch_size, compile_model, flex_backward = 8, True, True
        autocast = partial(torch.autocast, "cuda", dtype=torch.bfloat16)
        backend = "flex"
    else:  # dry run: every path but compile, at toy sizes (CPU flex is forward-only)
        device, dtype, sync = torch.device("cpu"), torch.float32, lambda: None
        B, H, T, D, docs, n = 2, 2, 128, 16, 6, 2
        config = ModelConfig(vocab_size=64, context_length=T, n_layer=1, n_head=2, n_embd=32)
        batch_size, compile_model, flex_backward = 2, False, False
        autocast = partial(torch.autocast, "cpu", enabled=False)
        backend = "sdpa"

    seg = segments(B, T, docs, seed=0, device=device)
    attn = attention_contenders(seg, H, D, dtype, backward=True)
    diff = check_flex_matches_dense(attention_contenders(seg, H, D, dtype, False), atol=2e-2)
    if not flex_backward:  # no FlexAttention backward on the CPU: time its forward only
        attn["flex"] = attention_contenders(seg, H, D, dtype, backward=False)["flex"]
    a = interleaved(attn, args.repeats, n, sync)

    batches = packed_batches(batch_size, T, docs, config.vocab_size, 4, device)
    cfg = {name: ModelConfig(**{**vars(config), "attention": att}) for name, att in
           (("flex", backend), ("sdpa", "sdpa"))}  # fmt: skip
    steps = {
        "eager flex": TrainStep(cfg["flex"], batches, False, autocast),
        "eager sdpa": TrainStep(cfg["sdpa"], batches, False, autocast),
    }
    if compile_model:
        steps["compiled flex"] = TrainStep(cfg["flex"], batches, True, autocast)
        try:  # compile errors are reported, not fatal: the attention rows still count
            steps["compiled flex"]()
        except Exception as err:  # noqa: BLE001
            print(f"model.compile=true failed, its rows are left out: {type(err).__name__}: {err}")
            del steps["compiled flex"]
            compile_model = False
    s = interleaved(steps, args.repeats, n, sync)
    tokens = batch_size * T

    print(f"\n{device.type}{' (dry run: toy sizes, numbers meaningless)' if args.dry_run else ''}:"
          f" attention B={B} H={H} T={T} D={D}, {docs} documents per row, {dtype}")  # fmt: skip
    print(f"model {config.n_layer}x{config.n_embd}, batch {batch_size}x{T}; medians of {args.repeats} repeats\n")  # fmt: skip
    rows = [
        ("attn fwd+bwd: dense-mask SDPA / Flex (time)", a["dense"] / a["flex"]),
        ("attn fwd+bwd: Flex / is_causal SDPA (time)", a["flex"] / a["is_causal"]),
        ("attn fwd+bwd, mask build included, ms: Flex", a["flex"]),
        ("  dense-mask SDPA", a["dense"]),
        ("  is_causal SDPA", a["is_causal"]),
        ("BlockMask build alone, ms", a["blockmask"]),
        ("max |Flex - dense| of the forward", diff),
        ("training step, eager Flex: tokens/s", tokens / s["eager flex"] * 1e3),
        ("training step: eager dense-mask SDPA / eager Flex (time)", s["eager sdpa"] / s["eager flex"]),
    ]  # fmt: skip
    if compile_model:
        rows += [
            ("training step, compiled Flex: tokens/s", tokens / s["compiled flex"] * 1e3),
            ("model.compile=true / eager, Flex (tokens/s)", s["eager flex"] / s["compiled flex"]),
        ]
    print(f"| {'measure':<58} | {'value':>10} |\n|{'-' * 60}|{'-' * 11}:|")
    for name, value in rows:
        print(f"| {name:<58} | {value:>10{'.3g' if abs(value) < 100 else '.0f'}} |")


if __name__ == "__main__":
    main()
