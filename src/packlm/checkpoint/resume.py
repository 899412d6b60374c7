"""Checks on `ckpt_path` and `init_from` made before any work starts, so a wrong resume
fails in seconds, and the list of settings a resume applies.

What a resume does with each setting that differs from the checkpoint's (docs/training.md, resume):
- refused, naming the key: the data plan (`data.*` keys of the plan, the store), the model
  shape, the tokenizer (vocab_size), the rank count. Start a new run from the weights with
  `init_from=<ckpt>` instead.
- refused: a checkpoint whose optimizer has other param groups (an older packlm's);
  another `data.chat_supervised` under `data.curriculum` (its phases count those targets).
- applied, and logged: `optim.*` (lr, embedding_lr_ratio, betas, eps, weight decay, warmup,
  min_lr_ratio, max_steps: the schedule is rebuilt from the current config), `trainer.max_steps`,
  `train.max_supervised_tokens`, `data.skip_steps` / `data.skip_documents`; everything else (logging, validation interval, ...).
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any

from packlm.checkpoint.contents import KEY as EXTRAS_KEY
from packlm.config.mixture import MIXTURE_KEY, mixture_signature
from packlm.config.model import ModelConfig, as_dict, param_group_names
from packlm.config.schema import Validated
from packlm.data.epoch.loader import PLAN_KEYS, check_plan_signature
from packlm.errors import ConfigError

NOT_SHAPE = ("compile", "attention", "dropout", "zero_init_proj")
"""Model keys that change how the model runs or how fresh weights start, not the weights a
checkpoint holds: a resume or init_from may change them."""
INIT_FROM_HINT = " To start a new run from these weights instead, give init_from=<ckpt>."


def check_resume(path: Any, checkpoint: dict[str, Any], config: Validated) -> None:
    """Refuse, before any work, a checkpoint whose data plan or model differs from the config."""
    if "state_dict" not in checkpoint or "hyper_parameters" not in checkpoint:
        raise ConfigError(f"ckpt_path={path}: not a packlm training checkpoint (no state_dict)")
    data = (checkpoint.get(EXTRAS_KEY) or {}).get("data")
    if data is not None:
        try:
            check_plan_signature(
                {f"data.{k}": data.get(k) for k in PLAN_KEYS}
                | {MIXTURE_KEY: mixture_signature(data)},
                {f"data.{k}": getattr(config.data, k) for k in PLAN_KEYS}
                | {MIXTURE_KEY: mixture_signature(config.data)},
                config.data.mixture_change_on_resume,
            )
        except ConfigError as e:
            raise ConfigError(f"ckpt_path={path}: {e}") from None
        check_chat_supervised(path, data, config.data)
    check_model_shape(path, checkpoint, config.model, skip=("vocab_size",))
    for state in checkpoint.get("optimizer_states") or []:
        groups = [g.get("name") for g in state.get("param_groups", [])]
        expected = list(param_group_names(config.optim))
        if groups != expected:
            raise ConfigError(
                f"ckpt_path={path}: its optimizer has the param groups {groups}, "
                f"optim.algorithm={config.optim.algorithm} has {expected} (another optim= "
                "or a checkpoint of an older packlm)." + INIT_FROM_HINT
            )


def check_chat_supervised(path: Any, saved: dict[str, Any], data: Any) -> None:
    """data.chat_supervised only changes the labels, so a resume may change it, except under
    data.curriculum: its phases switch on the targets the mask keeps (packlm.data.epoch.
    chat_mask), so another mask would move the switch behind the resumed position. A
    checkpoint from before the key trained the default, assistant."""
    before, now = saved.get("chat_supervised", "assistant"), data.chat_supervised
    if data.curriculum and before != now:
        raise ConfigError(
            f"ckpt_path={path}: data.chat_supervised: {before!r} in the checkpoint, {now!r} "
            "now; under data.curriculum the phases switch on the targets it keeps, so a "
            "resume keeps it." + INIT_FROM_HINT
        )


def check_model_shape(
    path: Any,
    checkpoint: dict[str, Any],
    model: ModelConfig,
    skip: tuple[str, ...] = (),
    key: str = "ckpt_path",
) -> None:
    saved = (checkpoint.get("hyper_parameters") or {}).get("model") or {}
    changed = [
        f"model.{f.name}: {saved[f.name]!r} in the checkpoint, {getattr(model, f.name)!r} now"
        for f in fields(ModelConfig)
        if f.name in saved
        and f.name not in (*skip, *NOT_SHAPE)
        and saved[f.name] != getattr(model, f.name)
    ]
    if changed:
        raise ConfigError(
            f"{key}={path}: the model differs from the checkpoint's ("
            + "; ".join(changed)
            + (
                "). Resume with the same model settings (vocab_size comes from the tokenizer)."
                + INIT_FROM_HINT
                if key == "ckpt_path"
                else ")."
            )
        )


def run_settings(config: Validated) -> dict[str, Any]:
    """What a checkpoint records so that a resume can say which settings it changes."""
    return {
        "trainer.max_steps": config.trainer.max_steps,
        "train.max_supervised_tokens": config.train.max_supervised_tokens,
        "data.skip_steps": list(config.data.skip_steps),  # a resume may add some (packlm.data.skip)
        "data.skip_documents": list(config.data.skip_documents),
    }


def changed_settings(checkpoint: dict[str, Any], config: Validated) -> list[str]:
    """'key: old -> new' for each applied setting that differs from the checkpoint's."""
    saved = {
        **{
            f"optim.{k}": v
            for k, v in (checkpoint.get("hyper_parameters") or {}).get("optim", {}).items()
        },
        **(checkpoint.get(EXTRAS_KEY) or {}).get("settings", {}),
    }
    now = {**{f"optim.{k}": v for k, v in as_dict(config.optim).items()}, **run_settings(config)}
    return [f"{k}: {saved[k]!r} -> {v!r}" for k, v in now.items() if k in saved and saved[k] != v]


def check_init_from(
    path: Any, checkpoint: dict[str, Any], model: ModelConfig, tokenizer: Any,
    cache_dir: Any = None,
) -> None:  # fmt: skip
    """init_from needs the same model shape and the same tokenizer (the same ids). Another
    tokenizer: the error names the checkpoint's, saved under `cache_dir` for tokenizer.path
    (and says when it lacks the chat tokens the run's conversations need)."""
    if "state_dict" not in checkpoint:
        raise ConfigError(f"init_from={path}: not a packlm training checkpoint (no state_dict)")
    check_model_shape(path, checkpoint, model, key="init_from")
    from packlm.checkpoint.contents import tokenizer_from_checkpoint

    saved = tokenizer_from_checkpoint(checkpoint)
    if saved.digest() == tokenizer.digest():
        return
    if cache_dir is None:
        raise ConfigError(
            f"init_from={path}: the checkpoint was trained with another tokenizer; give its "
            "tokenizer with tokenizer.path=<dir> (Tokenizer.save of the checkpoint's) and the same "
            "special tokens"
        )
    from packlm.checkpoint.load import tokenizer_config_of
    from packlm.tokenizer.chat import CHAT_TOKENS, ChatFormat, ChatTokenError

    if all(t in tokenizer.special_token_ids for t in CHAT_TOKENS):  # the run has conversations
        try:
            ChatFormat.of(saved)
        except ChatTokenError:
            raise ConfigError(
                f"init_from={path}: the checkpoint's tokenizer has no {' / '.join(CHAT_TOKENS)}, "
                "which conversations are rendered with: pretrain with them as special tokens "
                '(\'tokenizer.special_tokens=["<|endoftext|>","<|pad|>","<|im_start|>",'
                '"<|im_end|>"]\', docs/conversations.md), then fine-tune from that checkpoint'
            ) from None
    where = tokenizer_config_of(saved, cache_dir).path
    raise ConfigError(
        f"init_from={path}: the checkpoint was trained with another tokenizer; add "
        f"tokenizer.path={where} (the checkpoint's tokenizer, saved there) to use its ids"
    )
