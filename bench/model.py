"""Model benchmarks: packlm's training step against a GPT-2-style reference, as ratios.

    python bench/model.py [--quick] [--no-compile]   # CPU: about 5 minutes on 2 cores

At nanoGPT's CPU shape (4 layers, width 128, 4 heads, T=64, B=12, vocab 65), one run:
1. Training steps (forward + backward + clip + AdamW + schedule) in a bare loop: packlm's
   Transformer (document masks, 4 documents per row; stream rows; torch.compile, also in
   bf16-mixed where auto keeps float32) against
   `ReferenceGPT` (nanoGPT's GPT: LayerNorm, GELU MLP 4x, learned positions, is_causal
   SDPA, tied head, no biases), eager, with packlm's fused AdamW (so the ratio is the
   model's), and once with nanoGPT's own CPU optimizer (torch's default AdamW: nanoGPT asks
   for the fused kernel on CUDA only), nanoGPT's loop; and LitCausalLM in a Lightning Trainer with
   StepMetrics (eager, model.compile=true) against the same bare loops. The reference runs
   in float32, as nanoGPT's train.py does on any CPU; packlm in what trainer.precision=auto
   picks (32-true on a CPU), and both are also shown under bf16-mixed (with packlm's float32
   attention), so the ratio of the recipe and of the model are apart. Two bounds, float32
   with its matmuls computed in bf16 (`torch.set_float32_matmul_precision("medium")`, fast
   where oneDNN has bf16 units, e.g. AMX): packlm's model, and nanoGPT's block attending by
   the same matmul path; what separates them is the Llama block's elementwise work.
2. Forward + backward with document masks vs is_causal (stream rows), with the additive
   float mask the model uses and with a bool mask; and the two CPU attention paths with
   document masks: matmul (what model.attention=auto takes up to T=64) vs SDPA's flash
   kernel, at T=64 and T=256, and at T=256 under float32 matmul precision "medium" (auto
   takes matmul up to T=512 there: SDPA's flash kernel is slow under it); and LitCausalLM's
   loss at the default config's shape (2 x 128, vocab 4096, 32 x 128 tokens; in auto's
   precision) through the chunked head
   (fused.linear_cross_entropy, what the eager CPU step takes for logits this large) vs
   logits + F.cross_entropy. GPU figures: bench/gpu.py.
Every contender runs with glibc's malloc thresholds set as `train.keep_freed_memory=true` sets
them (train/allocator.py, off by default in train.py: a step's freed memory stays for the next);
`--glibc-default` leaves them as glibc sets them, for every contender.
A step's time is the wall time between consecutive step ends (data fetch included); with
`--cpu-time`, the CPU time of this process between them, on one thread: on a machine shared
with other jobs, wall time with two threads measures the scheduler (each parallel region waits
for a descheduled thread), CPU time on one thread the work. The
contenders take turns, one run each per repeat (the headline pair, reference and Lightning
auto, two runs: first and last, in A B ... B A order); a ratio is the median over repeats of
that repeat's ratio of median step times, so a busy minute on a shared machine hits both.
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import tempfile
import time
import warnings
from contextlib import contextmanager, nullcontext
from functools import partial

import lightning as L
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader

from packlm.callbacks import StepMetrics
from packlm.config.model import ModelConfig
from packlm.config.precision import auto_precision
from packlm.model import fused, masks
from packlm.model.lit_module import LitCausalLM
from packlm.model.schedule import lr_factor
from packlm.model.transformer import Transformer, positions_from_segments
from packlm.train.allocator import keep_freed_memory
from packlm.train.report import quiet_lightning_leaf_spec

CONFIG = dict(vocab_size=65, context_length=64, n_layer=4, n_head=4, n_embd=128,
              tie_embeddings=True)  # fmt: skip  # the reference's (nanoGPT's) tied head
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


clock = time.perf_counter  # --cpu-time: time.process_time (this process's CPU seconds)


def gaps(stamps: list[float], warmup: int) -> list[float]:
    return [b - a for a, b in zip(stamps[warmup:], stamps[warmup + 1 :], strict=False)]


# --- 1. the reference model and the bare loop ------------------------------------------------


class ReferenceBlock(nn.Module):
    """nanoGPT's Block (bias=False): LayerNorm, causal self-attention, LayerNorm, GELU MLP 4x."""

    mask = masks.AttentionMask(is_causal=True)  # is_causal SDPA

    def __init__(self, C: int, n_head: int):
        super().__init__()
        self.n_head = n_head
        self.ln_1, self.ln_2 = nn.LayerNorm(C, bias=False), nn.LayerNorm(C, bias=False)
        self.c_attn = nn.Linear(C, 3 * C, bias=False)
        self.c_proj = nn.Linear(C, C, bias=False)
        self.c_fc = nn.Linear(C, 4 * C, bias=False)
        self.mlp_proj = nn.Linear(4 * C, C, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=2)  # [B, T, C] each
        dtype = masks.attention_dtype(x)  # packlm's CPU rule: float32 under bf16 autocast
        q, k, v = (
            t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2).to(dtype) for t in (q, k, v)
        )  # [B, H, T, D]
        y = masks.attend(q, k, v, self.mask)  # [B, H, T, D]
        x = x + self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x))))  # [B, T, C]


class MatmulAttentionBlock(ReferenceBlock):
    """nanoGPT's Block attending by packlm's matmul path (`model.attention=auto` at T <= 64),
    not SDPA: a bound, what nanoGPT's design gets from bf16 matmuls (SDPA's flash kernel is
    about 10x slower at T=64 under float32_matmul_precision=medium in torch 2.13)."""

    mask = masks.AttentionMask(matmul=True)  # no dense mask: causal


class ReferenceGPT(nn.Module):
    """nanoGPT's GPT at the same width, depth and vocabulary: what users compare with."""

    block = ReferenceBlock

    def __init__(self, c: ModelConfig):
        super().__init__()
        self.wte = nn.Embedding(c.vocab_size, c.n_embd)
        self.wpe = nn.Embedding(c.context_length, c.n_embd)
        self.blocks = nn.ModuleList(self.block(c.n_embd, c.n_head) for _ in range(c.n_layer))
        self.ln_f = nn.LayerNorm(c.n_embd, bias=False)
        self.lm_head = nn.Linear(c.n_embd, c.vocab_size, bias=False)
        self.lm_head.weight = self.wte.weight
        for p in (p for p in self.parameters() if p.dim() == 2):
            nn.init.normal_(p, 0.0, 0.02)

    def forward(self, input_ids, segment_ids=None, position_ids=None) -> torch.Tensor:
        T = input_ids.shape[1]  # segments and positions ignored: plain causal attention
        x = self.wte(input_ids) + self.wpe(torch.arange(T, device=input_ids.device))
        for block in self.blocks:
            x = block(x)  # [B, T, C]
        return self.lm_head(self.ln_f(x))  # [B, T, V]


class MatmulAttentionGPT(ReferenceGPT):
    block = MatmulAttentionBlock


def seeded(model_class=Transformer, compile: bool = False) -> nn.Module:
    torch.manual_seed(0)
    model = model_class(ModelConfig(**CONFIG))
    return torch.compile(model) if compile else model


class BareLoop:
    """A model with AdamW + warmup/cosine, trained by a plain loop with packlm's math (sum CE /
    supervised, clip 1.0); built once, so a compiled model compiles once for all repeats.
    matmul_precision: torch.set_float32_matmul_precision's setting for its steps ("medium":
    float32 matmuls computed in bf16 where oneDNN has fast bf16, e.g. AMX; else unchanged).
    fused: AdamW's fused kernel, as LitCausalLM takes it (no fp16 scaler); False: torch's
    default on a CPU (a loop over the parameters), as nanoGPT's configure_optimizers leaves
    it there (it asks for fused on CUDA only)."""

    def __init__(
        self, model: nn.Module, stream: bool = False, bf16: bool = False,
        matmul_precision: str = "highest", fused: bool = True,
    ):  # fmt: skip
        self.model, self.stream, self.bf16 = model, stream, bf16
        self.matmul_precision = matmul_precision
        self.params = params = list(model.parameters())
        self.opt = torch.optim.AdamW(
            [{"params": [p for p in params if p.dim() >= 2], "weight_decay": 0.1},
             {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}],
            lr=3e-3, betas=(0.9, 0.95), fused=fused or None,
        )  # fmt: skip
        self.sched = torch.optim.lr_scheduler.LambdaLR(
            self.opt, partial(lr_factor, warmup=10, total=1000, min_ratio=0.1)
        )

    def __call__(self, batches, warmup: int) -> list[float]:
        with matmul_precision(self.matmul_precision):
            return self._steps(batches, warmup)

    def _steps(self, batches, warmup: int) -> list[float]:
        stamps = []
        for batch in DataLoader(batches, batch_size=None):
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=self.bf16):  # bf16-mixed
                if self.stream:  # as LitCausalLM does for stream batches: positions 0..T-1
                    logits = self.model(batch["input_ids"])
                else:
                    logits = self.model(
                        batch["input_ids"], batch["segment_ids"], batch["position_ids"]
                    )
                labels = batch["labels"]
                loss = (
                    F.cross_entropy(logits.flatten(0, 1), labels.flatten(), reduction="sum")
                    / (labels != -100).sum()
                )
            loss.backward()
            torch.nn.utils.clip_grad_norm_(self.params, 1.0)
            self.opt.step()
            self.sched.step()
            self.opt.zero_grad(set_to_none=True)
            stamps.append(clock())
        return gaps(stamps, warmup)


@contextmanager
def matmul_precision(precision: str):
    before = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision(precision)
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(before)


def under(precision: str, run, *args):
    """run(*args) under torch.set_float32_matmul_precision(precision)."""
    with matmul_precision(precision):
        return run(*args)


# --- 1. (cont.) Lightning ------------------------------------------------------------------------------


class StepStamps(L.Callback):
    def __init__(self):
        self.stamps = []

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        self.stamps.append(clock())


_modules: dict[bool, LitCausalLM] = {}


def lightning_loop(
    batches, warmup: int, tensorboard: bool, compile: bool = False, precision: str = "32-true"
) -> list[float]:
    """A fresh Trainer per call around one module per `compile`, built once (compiled once)."""
    if compile not in _modules:
        torch.manual_seed(0)
        _modules[compile] = LitCausalLM(
            dict(CONFIG, compile=compile), {"lr": 3e-3, "warmup_steps": 10, "max_steps": 1000}
        )
    lit = _modules[compile]
    stamps = StepStamps()
    with tempfile.TemporaryDirectory() as tmp:
        logger = L.pytorch.loggers.TensorBoardLogger(tmp) if tensorboard else False
        trainer = L.Trainer(
            accelerator="cpu", devices=1, max_steps=len(batches), gradient_clip_val=1.0,
            precision=precision,
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
            stamps.append(clock())
    return gaps(stamps, warmup)


HEAD_CONFIG = dict(vocab_size=4096, context_length=128, n_layer=2, n_head=4, n_embd=128)
HEAD_B, HEAD_T = 32, 128  # the default config's batch: 4096 x 4096 logits


def head_loss(batches, warmup: int, chunked: bool, bf16: bool) -> list[float]:
    """Forward + backward of LitCausalLM's loss at the default config's shape, the output head
    and CE in row chunks (fused.linear_cross_entropy) or as logits + F.cross_entropy; under
    bf16 autocast where trainer.precision=auto takes bf16-mixed."""
    torch.manual_seed(0)
    lit = LitCausalLM(HEAD_CONFIG)
    saved, fused.CE_CHUNKED_FROM = fused.CE_CHUNKED_FROM, 0 if chunked else 2**62
    stamps = []
    try:
        for batch in batches:
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
                loss = lit._cross_entropy(batch)[0]
            loss.backward()
            stamps.append(clock())
    finally:
        fused.CE_CHUNKED_FROM = saved
    return gaps(stamps, warmup)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--steps", type=int, default=20, help="timed steps per run (T=64)")
    parser.add_argument("--repeats", type=int, default=6)
    parser.add_argument("--quick", action="store_true", help="--steps 10 --repeats 3")
    parser.add_argument(
        "--no-compile", dest="compile", action="store_false", help="skip the model.compile rows"
    )
    parser.add_argument(
        "--glibc-default", dest="keep_freed", action="store_false",
        help="leave glibc's malloc thresholds as they are (train.keep_freed_memory=false, "
        "train.py's default) for every contender; by default they are set as "
        "train.keep_freed_memory=true sets them, for every contender",
    )  # fmt: skip
    parser.add_argument(
        "--cpu-time", action="store_true",
        help="one thread, steps timed in this process's CPU time (a machine shared with others)",
    )  # fmt: skip
    args = parser.parse_args()
    if args.cpu_time:
        global clock
        clock = time.process_time
        torch.set_num_threads(1)
    kept = keep_freed_memory() if args.keep_freed else False
    load_start = " ".join(f"{x:.1f}" for x in os.getloadavg())
    if args.quick:
        args.steps, args.repeats = 10, 3
    logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)  # its device/summary lines
    quiet_lightning_leaf_spec()  # as train.py: Lightning's LeafSpec() would warn on every fit
    # LitCausalLM has a validation_step; the timed loops have no validation data on purpose
    warnings.filterwarnings(
        "ignore", "You defined a `validation_step` but have no `val_dataloader`"
    )
    warmup = 5
    packed = [packed_batch(B, T, 4, 65, seed=i) for i in range(warmup + args.steps + 1)]
    long_config = dict(CONFIG, context_length=256)
    n_long = warmup + max(4, args.steps // 4) + 1
    long_packed = [packed_batch(B, 256, 4, 65, seed=i) for i in range(n_long)]

    auto = auto_precision("cpu")  # what trainer.precision=auto picks on this CPU
    low = auto == "bf16-mixed"
    loops = {
        "reference": BareLoop(seeded(ReferenceGPT)),
        "nanogpt loop": BareLoop(seeded(ReferenceGPT), fused=False),  # its CPU AdamW
        "reference bf16": BareLoop(seeded(ReferenceGPT), bf16=True),
        "bare": BareLoop(seeded()),
        "bare bf16": BareLoop(seeded(), bf16=True),
        "bare stream": BareLoop(seeded(), stream=True, bf16=low),
        # bounds: float32 with bf16 matmuls, packlm's model and nanoGPT's block (matmul path)
        "bare bf16 matmuls": BareLoop(seeded(), matmul_precision="medium"),
        "nanogpt bf16 matmuls": BareLoop(seeded(MatmulAttentionGPT), matmul_precision="medium"),
    }
    if args.compile:
        loops["bare compiled"] = BareLoop(seeded(compile=True), bf16=low)
        if not low:  # and what compiling gets from bf16 matmuls where auto keeps float32
            loops["bare compiled bf16"] = BareLoop(seeded(compile=True), bf16=True)
    contenders = {name: partial(loop, packed, warmup) for name, loop in loops.items()}
    head_batches = [
        packed_batch(HEAD_B, HEAD_T, 3, HEAD_CONFIG["vocab_size"], seed=i)
        for i in range(warmup + max(4, args.steps // 4) + 1)
    ]
    contenders |= {
        "head chunked": lambda: head_loss(head_batches, warmup, chunked=True, bf16=low),
        "head logits": lambda: head_loss(head_batches, warmup, chunked=False, bf16=low),
        "lightning auto": lambda: lightning_loop(packed, warmup, False, precision=auto),
        "lightning": lambda: lightning_loop(packed, warmup, tensorboard=False),
        "lightning+tb": lambda: lightning_loop(packed, warmup, tensorboard=True),
        "causal": lambda: forward_backward([as_stream(b) for b in packed], warmup, CONFIG),
        "float": lambda: forward_backward(packed, warmup, CONFIG),
        "bool": lambda: forward_backward(packed, warmup, CONFIG, bool_mask=True),
        "causal256": lambda: forward_backward([as_stream(b) for b in long_packed], warmup, long_config),
        "float256": lambda: forward_backward(long_packed, warmup, long_config),
        "sdpa": lambda: forward_backward(packed, warmup, dict(CONFIG, attention="sdpa")),
        "matmul256": lambda: forward_backward(long_packed, warmup, dict(long_config, attention="matmul")),
        "auto256 medium": lambda: under("medium", forward_backward, long_packed, warmup, long_config),
        "sdpa256 medium": lambda: under("medium", forward_backward, long_packed, warmup,
                                        dict(long_config, attention="sdpa")),
    }  # fmt: skip
    if args.compile:
        contenders["lightning compiled"] = partial(
            lightning_loop, packed, warmup, False, True, precision=auto
        )
    # the headline pair runs back to back twice a repeat, in A B ... B A order, so a busy
    # spell of this shared machine (they come and go in seconds) hits both sides alike
    headline = ["reference", "lightning auto"]
    others = [name for name in contenders if name not in headline]
    order = headline + others + headline[::-1]
    steps: dict[str, list[list[float]]] = {name: [] for name in contenders}
    for _ in range(args.repeats):
        for name in order:
            steps[name].append(contenders[name]())
    ms = {name: 1e3 * statistics.median(sum(s, [])) for name, s in steps.items()}

    def ratio(a: str, b: str) -> float:
        """Time of a / time of b, the median over repeats of each repeat's own ratio: the
        contenders of one repeat ran close in time, so a slow minute hits both. The headline
        pair has two runs a repeat; another contender is paired with the first of them."""
        n = min(len(steps[a]), len(steps[b]))

        def runs(name: str) -> list[list[float]]:
            return steps[name] if len(steps[name]) == n else steps[name][::2]

        pairs = zip(runs(a), runs(b), strict=True)
        return statistics.median(statistics.median(x) / statistics.median(y) for x, y in pairs)

    rows = [
        ("reference GPT-2-style model, float32, bare loop: tokens/s", B * T / ms["reference"] * 1e3),
        (f"packlm Lightning+StepMetrics, precision=auto ({auto}): tokens/s", B * T / ms["lightning auto"] * 1e3),
        (f"packlm Lightning, auto ({auto}) / reference float32 (tok/s; aim >= 1.2)", ratio("reference", "lightning auto")),
        ("nanoGPT's loop: reference + nanoGPT's CPU AdamW (not fused): tok/s", B * T / ms["nanogpt loop"] * 1e3),
        (f"packlm Lightning, auto ({auto}) / nanoGPT's loop (tok/s; aim >= 1.2)", ratio("nanogpt loop", "lightning auto")),
        ("packlm bare, document masks / nanoGPT's loop (tokens/s)", ratio("nanogpt loop", "bare")),
        ("packlm Lightning, 32-true / reference float32 (tokens/s)", ratio("reference", "lightning")),
        ("packlm bare, document masks, float32 / reference float32 (tok/s)", ratio("reference", "bare")),
        ("packlm bare, document masks, bf16-mixed / reference float32", ratio("reference", "bare bf16")),
        ("packlm bare, bf16-mixed / reference bf16-mixed, packlm's CPU rule", ratio("reference bf16", "bare bf16")),
        ("reference: bf16-mixed with packlm's CPU rule / float32 (tokens/s)", ratio("reference", "reference bf16")),
        (f"packlm bare, stream rows, {auto} / reference float32 (tokens/s)", ratio("reference", "bare stream")),
        ("packlm bare, doc masks, float32, bf16 matmuls (medium) / reference", ratio("reference", "bare bf16 matmuls")),
        ("bound: nanoGPT's block, matmul attention, bf16 matmuls / reference", ratio("reference", "nanogpt bf16 matmuls")),
    ]  # fmt: skip
    if args.compile:
        rows += [
            (f"packlm bare compiled, {auto} / reference eager float32 (tok/s)", ratio("reference", "bare compiled")),
            (f"packlm Lightning compiled, {auto} / reference float32 (tok/s)", ratio("reference", "lightning compiled")),
        ]  # fmt: skip
        if not low:
            rows.append(("packlm bare compiled, bf16-mixed / reference eager float32 (tok/s)", ratio("reference", "bare compiled bf16")))  # fmt: skip
    rows += [
        ("Lightning 32-true (no logger) / bare float32 (time; aim <= 1.05)", ratio("lightning", "bare")),
        ("Lightning + TensorBoard (every 10 steps) / bare (time)", ratio("lightning+tb", "bare")),
        ("T=64 fwd+bwd: block-diag float mask / is_causal (aim <= 1.1)", ratio("float", "causal")),
        ("T=64 fwd+bwd: block-diag bool mask / is_causal", ratio("bool", "causal")),
        ("T=256 fwd+bwd: block-diag float mask / is_causal", ratio("float256", "causal256")),
        ("T=64 fwd+bwd, doc masks: matmul attention (auto) / SDPA flash (time)", ratio("float", "sdpa")),
        ("T=256 fwd+bwd, doc masks: matmul / SDPA flash (auto) (time)", ratio("matmul256", "float256")),
        ("the same, matmul precision medium: SDPA flash / matmul (auto) (time)", ratio("sdpa256 medium", "auto256 medium")),
        (f"default config's loss fwd+bwd (4096x4096 logits), {auto}: chunked head / logits (time)", ratio("head chunked", "head logits")),
    ]  # fmt: skip
    print(
        f"\nmodel {CONFIG}, batch {B}x{T}, 4 documents per row, {torch.get_num_threads()} threads"
    )
    print(f"{args.repeats} repeats of {args.steps} steps; ratios: median of per-repeat ratios")
    print(f"freed memory kept in the process (train.keep_freed_memory), all contenders: {kept}")
    timing = "CPU time of this process, 1 thread" if args.cpu_time else "wall time"
    print(f"steps timed in {timing}; load average at start / end: {load_start} / "
          f"{' '.join(f'{x:.1f}' for x in os.getloadavg())}\n")  # fmt: skip
    print(f"| {'measure':<72} | {'value':>9} |\n|{'-' * 74}|{'-' * 10}:|")
    for name, value in rows:
        print(f"| {name:<72} | {value:>9.{3 if value < 100 else 0}f} |")


if __name__ == "__main__":
    main()
