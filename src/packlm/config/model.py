"""The `model` and `optim` config groups as dataclasses, validated before any work starts.

The defaults give a ~1M-parameter model (plus embeddings) that trains in minutes on two
CPU cores; scale n_layer / n_embd / context_length up on a GPU.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any, ClassVar

from packlm.config.group import ConfigGroup, check_bool, check_choice, check_positive_int
from packlm.errors import ConfigError

ATTENTION_BACKENDS = ("auto", "sdpa", "flex", "matmul")
LOSS_WEIGHTINGS = ("token", "document")
MLPS = ("swiglu", "relu2")
ALGORITHMS = ("adamw", "muon")
SCHEDULES = ("cosine", "wsd")
NS_DTYPES = ("auto", "float32", "bfloat16")


@dataclass
class ModelConfig(ConfigGroup):
    group: ClassVar[str] = "model"

    vocab_size: int = 4096
    """Rows of the token embedding; must cover every id the tokenizer emits (PAD included)."""
    context_length: int = 256
    """The longest window the model is meant for (data.window must not exceed it)."""
    n_layer: int = 2
    """Number of transformer blocks."""
    n_head: int = 4
    """Attention heads per block; n_embd / n_head is the head width (even, for RoPE)."""
    n_embd: int = 128
    """Width of the residual stream."""
    mlp_ratio: float = 8 / 3
    """SwiGLU hidden width = mlp_ratio * n_embd, rounded up to a multiple of 32 (8/3 keeps
    the parameter count of a 4x GELU MLP); mlp=relu2 takes 1.5x that."""
    dropout: float = 0.0
    """Dropout on embeddings and residual branches (not on attention probabilities, so all
    attention backends compute the same function)."""
    tie_embeddings: bool = False
    """Share the token embedding with the output head (GPT-2's way). Off: a separate head
    learned 0.02-0.04 bpb more at the same step time on two corpora (bench/presets.md)."""
    mlp: str = "swiglu"
    """swiglu: down(silu(gate x) * up x), hidden width mlp_hidden (Llama's). relu2:
    down(relu(up x)^2) (nanochat, modded-nanogpt), hidden width 1.5x SwiGLU's, so the same
    parameters (4 n_embd at mlp_ratio 8/3). format=hf exports swiglu only."""
    qk_norm: bool = False
    """RMSNorm on each head's queries and keys before the rotary turn, with a learned gain per
    head dimension shared by the heads (Qwen3's, nanochat's without the gain): the attention
    logits stay bounded. format=hf refuses it (Llama has none)."""
    zero_init_proj: bool = False
    """Initialize the output projection of each residual branch (attention proj, MLP down) to
    zero, so every block starts as the identity (modded-nanogpt, nanochat); off: N(0, 0.02 /
    sqrt(2 n_layer)), GPT-2's. An init only: checkpoints and exports are unchanged."""
    logit_softcap: float | None = None
    """Squash the output logits to (-cap, cap) with cap * tanh(logits / cap) (nanochat's 15,
    Gemma 2's 30); null: off. format=hf refuses it (Llama has none)."""
    residual_scalars: bool = False
    """Before each block, x = a_i * x + b_i * x0, x0 the embedding output, a learned pair per
    layer starting at (1, 0) (nanochat's resid/x0 lambdas; AdamW trains them at optim.lr, as
    the other vectors). format=hf refuses it."""
    rope_base: float = 10000.0
    """Base of the rotary position embedding frequencies."""
    attention: str = "auto"
    """auto (FlexAttention on CUDA; on CPU matmul for rows of up to 64 tokens, where it is
    faster, or of up to 512 under torch.set_float32_matmul_precision("medium"), which slows
    SDPA's CPU kernel, else SDPA), sdpa (dense mask), flex (FlexAttention; compiled on CUDA; on CPU torch
    only has a slow forward-only reference, for tests), matmul (two batched matmuls and a
    softmax; memory grows with T^2)."""
    loss_weighting: str = "token"
    """token: every supervised target weighs the same (sum CE / N of the step); document:
    every document piece weighs the same (mean of its CE, then mean over the step's pieces).
    Validation and bits per byte stay per token."""
    compile: Any = "auto"
    """torch.compile the Transformer: true, false or auto. Inductor fuses kernels; on a CPU it
    needs a C++ compiler; the first steps pay the compile time; large CPU logits still take
    the chunked head, on the compiled trunk. auto (train.py; the tools run eagerly): on with
    CUDA; on a CPU only with an instruction set where compiled steps were measured faster, a
    run long enough to repay the compile and a working C++ compiler; one line at the start
    says what it chose and why, and a compile that fails falls back to eager with a warning
    (packlm.config.compile_choice, docs/training.md). Checkpoints stay the same."""

    @property
    def head_dim(self) -> int:
        return self.n_embd // self.n_head

    @property
    def mlp_hidden(self) -> int:
        """The MLP's hidden width: mlp_ratio * n_embd rounded up to a multiple of 32 (SwiGLU),
        1.5 times that under mlp=relu2 (two matrices, not three: the same parameters)."""
        swiglu = 32 * -(-int(round(self.mlp_ratio * self.n_embd)) // 32)
        return swiglu if self.mlp == "swiglu" else 3 * swiglu // 2

    def validate(self) -> ModelConfig:
        """Raise ConfigError naming the key of the first invalid value; returns self."""
        for key in ("vocab_size", "context_length", "n_layer", "n_head", "n_embd"):
            check_positive_int(f"model.{key}", getattr(self, key))
        if self.n_embd % self.n_head != 0:
            raise ConfigError(
                f"model.n_embd={self.n_embd}: must be divisible by model.n_head={self.n_head}"
            )
        if self.head_dim % 2 != 0:
            raise ConfigError(
                f"model.n_head={self.n_head}: head width n_embd/n_head={self.head_dim} must be even (RoPE)"
            )
        if not isinstance(self.mlp_ratio, (int, float)) or self.mlp_ratio <= 0:
            raise ConfigError(f"model.mlp_ratio={self.mlp_ratio!r}: must be a positive number")
        if not isinstance(self.dropout, (int, float)) or not 0.0 <= self.dropout < 1.0:
            raise ConfigError(f"model.dropout={self.dropout!r}: must be in [0, 1)")
        if not isinstance(self.rope_base, (int, float)) or self.rope_base <= 1.0:
            raise ConfigError(f"model.rope_base={self.rope_base!r}: must be a number > 1")
        check_choice("model.attention", self.attention, ATTENTION_BACKENDS)
        check_choice("model.loss_weighting", self.loss_weighting, LOSS_WEIGHTINGS)
        check_choice("model.mlp", self.mlp, MLPS)
        if self.mlp_hidden < 1:
            raise ConfigError(
                f"model.mlp_ratio={self.mlp_ratio!r}: the MLP's hidden width "
                f"mlp_ratio * n_embd = {self.mlp_ratio * self.n_embd:g} rounds to 0"
            )
        for key in ("tie_embeddings", "qk_norm", "zero_init_proj", "residual_scalars"):
            check_bool(f"model.{key}", getattr(self, key))  # "false" (a str) would be on
        if not (isinstance(self.compile, bool) or self.compile == "auto"):  # 1 == True: not a bool
            raise ConfigError(f"model.compile={self.compile!r}: true, false or auto")
        cap = self.logit_softcap
        if cap is not None and (
            isinstance(cap, bool) or not isinstance(cap, (int, float)) or cap <= 0
        ):
            raise ConfigError(f"model.logit_softcap={cap!r}: a positive number, or null (off)")
        return self


PARAM_GROUPS = ("matrices", "embedding", "vectors")
"""AdamW's param groups, in order (LitCausalLM.param_groups); a resume checks them."""
MUON_PARAM_GROUPS = ("hidden", "embedding", "head", "vectors")
"""optim=muon's: the hidden matrices (Muon), then AdamW's embedding, head and vectors."""


def param_group_names(optim: OptimConfig) -> tuple[str, ...]:
    """The param groups optim.algorithm trains with, in order (a resume checks them)."""
    return MUON_PARAM_GROUPS if optim.algorithm == "muon" else PARAM_GROUPS


@dataclass
class OptimConfig(ConfigGroup):
    group: ClassVar[str] = "optim"

    algorithm: str = "adamw"
    """adamw: AdamW for every weight. muon (optim=muon): Muon for the hidden matrices
    (attention and MLP weights; muon_* keys), AdamW for the embedding, the head and the
    vectors (lr, embedding_lr_ratio, betas, eps, weight_decay), as in nanochat and
    modded-nanogpt (packlm.model.muon). Not with trainer.strategy=fsdp, which shards the
    matrices into 1-D pieces: DDP keeps them whole."""
    lr: float = 3e-3
    """Peak learning rate of AdamW (under optim=muon: of the head and vectors), reached at
    the end of warmup."""
    weight_decay: float = 0.1
    """Decoupled weight decay, applied to matrices (2-D parameters) only."""
    embedding_lr_ratio: float = 10.0
    """The token embedding trains at lr * this (the same schedule). Adam moves a weight by
    about lr a step, but an embedding row only moves on the steps its token occurs: 10 learned
    0.05 bpb more than 1 on three corpora (bench/presets.md); 1 is nanoGPT's AdamW. With a
    tied head (model.tie_embeddings) the head takes it too."""
    betas: tuple[float, float] = (0.9, 0.99)
    """AdamW moment coefficients. 0.99 (nanoGPT's for few tokens a step) learned 0.003-0.007
    bpb more than 0.95 on three corpora (bench/presets.md); large-batch recipes use 0.95."""
    eps: float = 1e-8
    """AdamW denominator epsilon."""
    warmup_steps: int = 100
    """Optimizer steps of linear warmup from lr/warmup_steps to lr."""
    max_steps: int | None = None
    """Optimizer steps of the cosine schedule; None: the Trainer's estimated stepping batches."""
    min_lr_ratio: float = 0.1
    """The cosine (or the warmdown) decays to lr * min_lr_ratio, then stays there."""
    schedule: str = "cosine"
    """The lr after warmup. cosine: from lr down to lr * min_lr_ratio over the horizon. wsd
    (warmup-stable-decay, nanochat's and modded-nanogpt's): flat at lr, then linear down to
    lr * min_lr_ratio over the last warmdown_ratio of the horizon (steps, tokens under a
    curriculum, or the time limit's share with anneal_by_time)."""
    warmdown_ratio: float = 0.2
    """schedule=wsd: the share of the horizon after warmup spent decaying (nanochat's 0.2)."""
    muon_lr: float = 0.02
    """optim=muon: peak lr of the hidden matrices, scaled by sqrt(max(1, rows/cols)) (Keller
    Jordan's and nanochat's 0.02 and rule; torch.optim.Muon's default is 1e-3 with the same
    rule), on the same schedule as lr."""
    muon_momentum: float = 0.95
    """optim=muon: Muon's (Nesterov) momentum after its warmup."""
    muon_momentum_start: float = 0.85
    """optim=muon: Muon's momentum at step 0, raised linearly to muon_momentum over
    muon_momentum_warmup_steps (nanochat's 0.85 over 300 steps)."""
    muon_momentum_warmup_steps: int = 300
    """optim=muon: optimizer steps of the momentum warmup (0: muon_momentum from the start)."""
    muon_weight_decay: float = 0.0
    """optim=muon: decoupled weight decay of the hidden matrices, p *= 1 - lr * this (Keller
    Jordan's 0; torch.optim.Muon's default 0.1)."""
    muon_ns_steps: int = 5
    """optim=muon: Newton-Schulz steps orthogonalizing each update (quintic a=3.4445,
    b=-4.7750, c=2.0315)."""
    muon_ns_dtype: str = "auto"
    """optim=muon: the Newton-Schulz iteration's precision. auto: bfloat16 (torch.optim.Muon
    itself) where bf16 matmuls are native (CUDA; CPUs with avx512_bf16 or AMX), else float32
    (packlm.model.muon: bf16 emulated on a CPU ran 36 steps of a minute against 337)."""
    anneal_by_time: bool = False
    """With trainer.max_time: the cosine also runs on the clock, reaching min_lr_ratio when the
    time is up (progress after warmup: the larger of the steps' and the time's share), so a run
    the time limit stops ends annealed, not mid-schedule. The lr then depends on the machine's
    speed, and a run is not repeatable step for step. No effect without trainer.max_time."""

    def __post_init__(self) -> None:
        self.betas = tuple(self.betas)  # a YAML list or a tuple

    def validate(self) -> OptimConfig:
        """Raise ConfigError naming the key of the first invalid value; returns self."""
        if not isinstance(self.lr, (int, float)) or self.lr <= 0:
            raise ConfigError(f"optim.lr={self.lr!r}: must be a positive number")
        if not isinstance(self.weight_decay, (int, float)) or self.weight_decay < 0:
            raise ConfigError(f"optim.weight_decay={self.weight_decay!r}: must be >= 0")
        ratio = self.embedding_lr_ratio
        if isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or ratio <= 0:
            raise ConfigError(f"optim.embedding_lr_ratio={ratio!r}: must be a positive number")
        if len(self.betas) != 2 or not all(
            isinstance(b, (int, float)) and not isinstance(b, bool) and 0 <= b < 1
            for b in self.betas
        ):
            raise ConfigError(f"optim.betas={list(self.betas)}: two numbers in [0, 1)")
        if not isinstance(self.eps, (int, float)) or self.eps <= 0:
            raise ConfigError(f"optim.eps={self.eps!r}: must be a positive number")
        steps = self.warmup_steps
        if isinstance(steps, bool) or not isinstance(steps, int) or steps < 0:
            raise ConfigError(f"optim.warmup_steps={steps!r}: must be an integer >= 0")
        if self.max_steps is not None:
            check_positive_int("optim.max_steps", self.max_steps)
        ratio = self.min_lr_ratio
        if isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or not 0 <= ratio <= 1:
            raise ConfigError(f"optim.min_lr_ratio={ratio!r}: must be in [0, 1]")
        check_bool("optim.anneal_by_time", self.anneal_by_time)
        check_choice("optim.algorithm", self.algorithm, ALGORITHMS)
        check_choice("optim.schedule", self.schedule, SCHEDULES)
        ratio = self.warmdown_ratio
        if isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or not 0 < ratio <= 1:
            raise ConfigError(f"optim.warmdown_ratio={ratio!r}: must be in (0, 1]")
        check_choice("optim.muon_ns_dtype", self.muon_ns_dtype, NS_DTYPES)
        for key in ("muon_lr", "muon_weight_decay", "muon_momentum", "muon_momentum_start"):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                raise ConfigError(f"optim.{key}={value!r}: must be a number >= 0")
        if self.muon_lr <= 0:
            raise ConfigError(f"optim.muon_lr={self.muon_lr!r}: must be a positive number")
        for key in ("muon_momentum", "muon_momentum_start"):
            if getattr(self, key) >= 1:
                raise ConfigError(f"optim.{key}={getattr(self, key)!r}: must be in [0, 1)")
        steps = self.muon_momentum_warmup_steps
        if isinstance(steps, bool) or not isinstance(steps, int) or steps < 0:
            raise ConfigError(
                f"optim.muon_momentum_warmup_steps={steps!r}: must be an integer >= 0"
            )
        check_positive_int("optim.muon_ns_steps", self.muon_ns_steps)
        if self.muon_ns_steps > 20:
            raise ConfigError(
                f"optim.muon_ns_steps={self.muon_ns_steps}: at most 20 (5 is the recipe's)"
            )
        self._check_decay_keeps_weights()
        return self

    def ignored(self, time_limit: bool) -> list[str]:
        """'key=value (why)', one per setting given (not its default) that changes nothing in
        this config: muon_* under algorithm=adamw, warmdown_ratio under schedule=cosine,
        anneal_by_time without a time limit. A forgotten optim=muon trained AdamW in silence."""
        out = []
        if self.algorithm != "muon":
            for f in fields(self):
                value = getattr(self, f.name)
                if f.name.startswith("muon_") and value != f.default:
                    out.append(f"optim.{f.name}={value} (optim.algorithm=adamw: give optim=muon)")
        if self.schedule != "wsd" and self.warmdown_ratio != OptimConfig.warmdown_ratio:
            out.append(f"optim.warmdown_ratio={self.warmdown_ratio} (optim.schedule=cosine)")
        if self.anneal_by_time and not time_limit:
            out.append("optim.anneal_by_time=true (no trainer.max_time)")
        return out

    def _check_decay_keeps_weights(self) -> None:
        """Decoupled weight decay multiplies a weight by 1 - lr * weight_decay at each step:
        at a peak lr where that is <= 0, every step zeroes or flips the weights (optim.
        muon_weight_decay=1e30 trained 950 steps of NaN). Each group's peak lr counts."""
        embedding = self.lr * self.embedding_lr_ratio
        peaks = [
            ("optim.weight_decay", self.weight_decay, self.lr, "optim.lr"),
            ("optim.weight_decay", self.weight_decay, embedding, "optim.lr * embedding_lr_ratio"),
        ]
        if self.algorithm == "muon":
            peaks.append(
                ("optim.muon_weight_decay", self.muon_weight_decay, self.muon_lr, "optim.muon_lr")
            )
        for key, decay, lr, named in peaks:
            if lr * decay >= 1:
                raise ConfigError(
                    f"{key}={decay!r}: with the peak lr {named} = {lr:g}, each step multiplies "
                    f"the weights by 1 - lr * decay = {1 - lr * decay:g}, which zeroes or flips "
                    "them; lr * decay must stay below 1"
                )


def check_strategy(optim: OptimConfig, strategy: Any) -> OptimConfig:
    """Muon orthogonalizes whole matrices, but FSDP hands the optimizer each rank's 1-D piece
    of every weight (Lightning's use_orig_params=True, measured: a [16, 8] weight is (122,) on
    rank 0 and (6,) on rank 1): Muon would get no matrix and AdamW would train them all."""
    if optim.algorithm == "muon" and isinstance(strategy, str) and strategy.startswith("fsdp"):
        raise ConfigError(
            f"optim.algorithm=muon: not with trainer.strategy={strategy}, which shards every "
            "weight matrix into 1-D pieces before the optimizer sees it (Muon orthogonalizes "
            "whole matrices); use trainer.strategy=ddp, or optim=adamw"
        )
    return optim


def as_dict(config: Any) -> dict[str, Any]:
    """Plain dict of a config dataclass (for save_hyperparameters / YAML)."""
    out = asdict(config)
    return {k: list(v) if isinstance(v, tuple) else v for k, v in out.items()}
