"""GPU benchmark: tokens/s, model FLOPs utilization and peak memory of packlm's training step.

    python bench/gpu.py                 # a 124M model (GPT-2 small's shape), T=1024 and 2048
    python bench/gpu.py --strategies    # train.py under DDP against FSDP, every visible GPU

Without a CUDA GPU it says so and runs the same code paths at a tiny size on the CPU (the
numbers mean nothing there; tests/app/test_bench_gpu.py runs it), so the command a GPU user
types has run before.

The training step (forward + backward + optimizer, fixed packed batches of many documents per
row, mean length DOC_TOKENS) of packlm's Transformer, for each T, attention path and
torch.compile off / on, in bf16-mixed (autocast; `--precision 32-true` for float32), with
AdamW, and with optim=muon on the FlexAttention path (packlm.model.muon.MuonAdamW over the
param groups training uses: Muon's Newton-Schulz steps on every hidden matrix, in bf16 where
bf16 is native as `optim.muon_ns_dtype=auto` chooses; the MFU counts the model's FLOPs only,
so Muon's cost shows as a lower MFU at the same model):
- sdpa: SDPA with the additive [B, 1, T, T] block-diagonal mask, built once per step;
- flex: FlexAttention with a BlockMask from the segment ids (model.attention=auto on CUDA).
Before timing, the flex and sdpa models' logits on one batch must agree (same weights).
Each contender runs in its own process: peak memory is the step's own (weights, AdamW state,
activations; `torch.cuda.max_memory_allocated`), a failed compile or an OOM loses one row.
MFU = FLOPs per token x tokens/s / the GPU's dense bf16 peak, FLOPs per token by nanoGPT's
`estimate_mfu`: 6 N + 12 L C T, N the parameters in matmuls (the token embedding only when
tied to the head), the attention term for a full causal row (packed rows need less: the
useful fraction is printed per T). Peaks known by GPU name; `--peak-tflops` for others.
`--strategies`: `python train.py` with trainer.strategy=ddp and fsdp (model=medium, 60 steps,
bf16-mixed): supervised tokens/s and the final val/loss, which should agree to bf16's
precision; on the CPU it trains DDP on two processes (gloo) and says FSDP needs CUDA.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from contextlib import contextmanager, nullcontext
from pathlib import Path

import torch
import torch.nn.functional as F

from packlm.config.model import ModelConfig, OptimConfig
from packlm.model.lit_module import LitCausalLM
from packlm.model.loss import attention_pairs
from packlm.model.muon import MuonAdamW, bf16_native
from packlm.model.transformer import Transformer, positions_from_segments

GPT2_124M = dict(vocab_size=50304, n_layer=12, n_head=12, n_embd=768, tie_embeddings=True)
TINY = dict(vocab_size=64, n_layer=2, n_head=2, n_embd=32, tie_embeddings=True)
DOC_TOKENS = 96  # mean document length: T=2048 rows hold about 21 documents
# dense bf16 tensor-core peaks, TFLOP/s (vendor sheets, no sparsity); first match wins
PEAK_BF16_TFLOPS = (("H100 PCIe", 756.0), ("H100", 989.0), ("H200", 989.0), ("GH200", 989.0),
                    ("B200", 2250.0), ("A100", 312.0), ("L40S", 362.0), ("L4", 121.0),
                    ("A10", 125.0))  # fmt: skip


def segments(B: int, T: int, docs_per_row: int, seed: int, device) -> torch.Tensor:
    """[B, T] int32 segment ids: each row cut into `docs_per_row` documents at random points."""
    g = torch.Generator().manual_seed(seed)
    cuts = torch.rand(B, T - 1, generator=g).argsort(dim=1)[:, : docs_per_row - 1] + 1  # [B, n-1]
    starts = torch.zeros(B, T, dtype=torch.int32)
    starts.scatter_(1, cuts, 1)  # 1 at every document start but the first
    return starts.cumsum(dim=1, dtype=torch.int32).to(device)  # [B, T]


def docs_per_row(T: int) -> int:
    return max(2, T // DOC_TOKENS)


def packed_batches(B: int, T: int, vocab: int, n: int, device) -> list[dict]:
    out = []
    for i in range(n):
        seg = segments(B, T, docs_per_row(T), seed=i, device=device)  # [B, T]
        ids = torch.randint(0, vocab, (B, T), generator=torch.Generator().manual_seed(i))
        ids = ids.to(device)
        labels = ids.roll(-1, dims=1)
        labels[:, :-1][seg[:, 1:] != seg[:, :-1]] = -100  # no target across a document end
        labels[:, -1] = -100
        pos = positions_from_segments(seg, B, T, device)
        out.append({"input_ids": ids, "labels": labels, "segment_ids": seg, "position_ids": pos})
    return out


def flops_per_token(model: Transformer, T: int) -> float:
    """nanoGPT's estimate_mfu: 6 N + 12 L C T (forward + backward, full causal rows)."""
    c = model.config
    n = model.num_parameters() - (0 if c.tie_embeddings else model.wte.weight.numel())
    return 6 * n + 12 * c.n_layer * c.n_embd * T


def peak_flops(device: torch.device, override: float | None) -> float | None:
    if override is not None:
        return override * 1e12
    if device.type != "cuda":
        return None
    name = torch.cuda.get_device_name(device)
    return next((tf * 1e12 for key, tf in PEAK_BF16_TFLOPS if key in name), None)


def optimizer(model: Transformer, algorithm: str, device: torch.device) -> torch.optim.Optimizer:
    """AdamW over every weight, or training's optim=muon: MuonAdamW over the param groups
    LitCausalLM gives the optimizer (hidden matrices Muon's, the rest AdamW's)."""
    cuda = device.type == "cuda"
    if algorithm == "adamw":
        return torch.optim.AdamW(model.parameters(), lr=1e-4, fused=cuda)
    o = OptimConfig(algorithm="muon")
    lit = LitCausalLM(model=model.config, optim=o)
    lit.model = model  # the groups of this model's parameters
    ns_dtype = torch.bfloat16 if bf16_native(device) else torch.float32  # muon_ns_dtype=auto
    return MuonAdamW(lit.param_groups(), betas=o.betas, eps=o.eps, fused=cuda,
                     momentum=o.muon_momentum, ns_steps=o.muon_ns_steps, ns_dtype=ns_dtype)  # fmt: skip


class TrainStep:
    """One model + its optimizer on fixed packed batches: attention path, compile, precision
    and optimizer (adamw / muon) set."""

    def __init__(self, config: ModelConfig, batches: list[dict], compile: bool, bf16: bool,
                 algorithm: str = "adamw"):  # fmt: skip
        torch.manual_seed(0)
        self.device = batches[0]["input_ids"].device
        self.model = Transformer(config).to(self.device)
        self.run = torch.compile(self.model) if compile else self.model
        cuda = self.device.type == "cuda"
        self.opt = optimizer(self.model, algorithm, self.device)
        self.batches, self.i, self.bf16 = batches, 0, bf16
        # CPU FlexAttention has a forward only (torch raises on its backward): time that
        self.forward_only = config.attention == "flex" and not cuda

    def autocast(self):
        return torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.bf16)

    def logits(self, batch: dict) -> torch.Tensor:
        return self.run(batch["input_ids"], batch["segment_ids"], batch["position_ids"])

    def __call__(self) -> None:
        batch = self.batches[self.i % len(self.batches)]
        self.i += 1
        with self.autocast(), torch.no_grad() if self.forward_only else nullcontext():
            logits = self.logits(batch)
            loss = F.cross_entropy(logits.flatten(0, 1).float(), batch["labels"].flatten())
        if not self.forward_only:
            loss.backward()
            self.opt.step()
            self.opt.zero_grad(set_to_none=True)


@contextmanager
def eager_flex_quiet():
    """torch's warning that FlexAttention runs unfused without torch.compile, muted where that
    is the point: on a CPU (no compiled kernel there in torch 2.13; the table says so)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "flex_attention called without torch.compile")
        yield


def check_flex_matches_sdpa(config: dict, batch: dict) -> float:
    """Max |logits flex - logits sdpa| of one float32 forward, the same weights: must agree."""
    cpu = batch["input_ids"].device.type == "cpu"
    with torch.no_grad(), eager_flex_quiet() if cpu else nullcontext():
        out = [
            TrainStep(ModelConfig(**config, attention=a), [batch], False, False).logits(batch)
            for a in ("flex", "sdpa")
        ]
    diff = (out[0] - out[1]).abs().max().item()
    if not diff <= 2e-3:
        raise SystemExit(f"FlexAttention and dense-mask SDPA disagree: max |diff| {diff:.3g}")
    return diff


def measure(step: TrainStep, warmup: int, n: int, repeats: int) -> tuple[float, float | None]:
    """(median seconds a step, peak bytes allocated or None on the CPU); warm-up compiles."""
    cuda = step.device.type == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    for _ in range(warmup):
        step()
    sync()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(n):
            step()
        sync()
        times.append((time.perf_counter() - start) / n)
    return statistics.median(times), torch.cuda.max_memory_allocated() if cuda else None


def shapes(gpu: bool) -> tuple[dict, dict[int, int], int, int]:
    """(model config, batch size per T, warm-up steps, steps per repeat)."""
    if gpu:
        return GPT2_124M, {1024: 16, 2048: 8}, 3, 10
    return TINY, {64: 4, 128: 2}, 1, 2


def contender(args, device: torch.device) -> None:
    """`--contender T,attention,compile,optim`: one row, measured in a fresh process (its own
    peak memory and compile caches; a crash or OOM loses that row only), printed for the parent."""
    T, attention, compile, algorithm = args.contender.split(",")
    base, sizes, warmup, n = shapes(device.type == "cuda")
    T = int(T)
    batches = packed_batches(sizes[T], T, base["vocab_size"], 4, device)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    cfg = ModelConfig(**base, context_length=T, attention=attention)
    step = TrainStep(cfg, batches, compile == "on", args.precision == "bf16-mixed", algorithm)
    with eager_flex_quiet() if device.type == "cpu" else nullcontext():
        seconds, peak_bytes = measure(step, warmup, n, args.repeats)
    print("RESULT " + json.dumps({"seconds": seconds, "peak_bytes": peak_bytes}))


def run_contender(args, T: int, attention: str, compile: str, algorithm: str) -> dict | str:
    """The measurement of one row from its own process, or why it failed (one line)."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--contender",
           f"{T},{attention},{compile},{algorithm}", "--repeats", str(args.repeats),
           "--precision", args.precision]  # fmt: skip
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    found = re.search(r"^RESULT (.*)$", out.stdout, re.M)
    if out.returncode == 0 and found:
        return json.loads(found[1])
    lines = [line for line in out.stderr.splitlines() if line.strip()] or ["no output"]
    errors = [line for line in lines if re.match(r"[\w.]*(Error|Exception)\b", line)]
    return f"failed (exit {out.returncode}): {(errors or lines)[-1][:200]}"


def model_rows(args, device: torch.device) -> None:
    """The table: each T x attention path x compile with AdamW, and flex x compile with Muon,
    each in its own process."""
    gpu = device.type == "cuda"
    base, sizes, _, n = shapes(gpu)
    peak = peak_flops(device, args.peak_tflops)
    print(f"{device.type}{' ' + torch.cuda.get_device_name(device) if gpu else ''}, "
          f"{args.precision}, model {base}, medians of {args.repeats} x {n} steps"
          f"{' (CPU: tiny, numbers meaningless; FlexAttention forward only)' if not gpu else ''}")  # fmt: skip
    print(f"peak {peak / 1e12:.0f} TFLOP/s" if peak else "peak FLOP/s unknown: MFU n/a "
          "(--peak-tflops)")  # fmt: skip
    print("\n| T | B | docs/row | useful attn | attention | compile | optim | tokens/s | MFU | "
          "peak MiB | ms/step |\n|---|---|---|---|---|---|---|---:|---:|---:|---:|")  # fmt: skip
    for T, B in sizes.items():
        config = dict(base, context_length=T)
        batches = packed_batches(B, T, base["vocab_size"], 1, device)
        useful, dense = attention_pairs(batches[0])
        diff = check_flex_matches_sdpa(config, batches[0])
        del batches
        if gpu:
            torch.cuda.empty_cache()
        fpt = flops_per_token(meta_model(ModelConfig(**config)), T)
        rows = [("sdpa", "adamw"), ("flex", "adamw"), ("flex", "muon")]
        for attention, algorithm in rows:
            for compile in ("off", "on") if args.compile else ("off",):
                got = run_contender(args, T, attention, compile, algorithm)
                head = f"| {T} | {B} | {docs_per_row(T)} | {float(useful / dense):.3f} | {attention} | {compile} | {algorithm} |"  # fmt: skip
                if isinstance(got, str):
                    print(f"{head} {got} | | | |")
                    continue
                tokens_s = B * T / got["seconds"]
                mfu = f"{fpt * tokens_s / peak:.1%}" if peak else "n/a"
                peak_bytes = got["peak_bytes"]
                mem = f"{peak_bytes / 2**20:,.0f}" if peak_bytes is not None else "n/a"
                print(f"{head} {tokens_s:,.0f} | {mfu} | {mem} | {got['seconds'] * 1e3:.1f} |")
        print(f"|  T={T}: max abs(flex - sdpa) logits, float32: {diff:.2e} | | | | | | | | | | |")


def meta_model(cfg: ModelConfig) -> Transformer:
    """The model's shapes without its memory (for counting parameters)."""
    with torch.device("meta"):
        return Transformer(cfg)


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


def strategies(gpu: bool) -> None:
    """`--strategies`: DDP against FSDP through train.py, the same run otherwise."""
    if not gpu:
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
    parser.add_argument("--precision", choices=("bf16-mixed", "32-true"), default="bf16-mixed")
    parser.add_argument("--no-compile", dest="compile", action="store_false",
                        help="leave out the torch.compile rows")  # fmt: skip
    parser.add_argument("--peak-tflops", type=float, help="the GPU's peak, for MFU")
    parser.add_argument("--strategies", action="store_true", help="DDP vs FSDP through train.py")
    parser.add_argument("--contender", help=argparse.SUPPRESS)  # T,attention,compile: one row
    args = parser.parse_args()
    gpu = torch.cuda.is_available()
    if args.contender:
        contender(args, torch.device("cuda" if gpu else "cpu"))
        return
    if not gpu:
        print("No CUDA GPU found: running the same code paths at a tiny size on the CPU.")
    if args.strategies:
        strategies(gpu)
        return
    model_rows(args, torch.device("cuda" if gpu else "cpu"))


if __name__ == "__main__":
    main()
