"""`format=hf`: a folder that transformers loads offline as LlamaForCausalLM + its tokenizer.

packlm's Transformer is Llama's architecture (pre-norm RMSNorm, rotary positions in the
half-split convention of Llama's `rotate_half`, SwiGLU, no biases), so the mapping is
renaming plus two splits: `qkv` -> q/k/v_proj and `gate_up` -> gate/up_proj. The weights
are loaded into a real `LlamaForCausalLM` with strict key checking before they are saved,
so a mapping that misses a tensor fails here, not in the user's code.

What transformers cannot express is refused or said: a model trained with model.qk_norm,
mlp=relu2, logit_softcap or residual_scalars is refused in one line (`not_llama`; Llama has
none of them; model.zero_init_proj is an init only and exports as usual); packlm's dropout on residual branches
(only matters when training; Llama has attention dropout only) is dropped with the model
config recorded, and packed rows need packlm's block-diagonal mask (in transformers, run
one document per row, or pass an attention_mask).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from packlm.config.model import ModelConfig, as_dict
from packlm.errors import ConfigError
from packlm.tokenizer.chat import CHAT_TOKENS, HF_CHAT_TEMPLATE
from packlm.tokenizer.formats import write_atomic

PAD_TOKEN = "<|pad|>"
BOS_TOKENS = ("<|bos|>", "<|begin_of_text|>", "<s>")
"""A special token under one of these names is BOS; otherwise BOS is EOS (GPT-2's habit)."""


def require_hf():
    """Import transformers and safetensors, or say which extra to install."""
    try:
        import safetensors  # noqa: F401
        import transformers
    except ImportError as e:
        raise ImportError(
            f"format=hf needs transformers and safetensors ({e.name} is missing): "
            'pip install "packlm[hf]"'
        ) from None
    return transformers


def special_roles(tokenizer) -> dict[str, str]:
    """bos/eos/pad token strings: EOS is packlm's first special token, PAD "<|pad|>"."""
    specials = tokenizer.special_tokens
    if not specials:
        raise ValueError("the tokenizer has no special tokens, so no EOS to export")
    eos = specials[0]
    bos = next((s for s in BOS_TOKENS if s in specials), eos)
    pad = PAD_TOKEN if PAD_TOKEN in specials else eos
    return {"bos_token": bos, "eos_token": eos, "pad_token": pad}


def llama_config(model: ModelConfig, tokenizer) -> Any:
    """The LlamaConfig computing what packlm's Transformer computes."""
    transformers = require_hf()
    ids = {role: tokenizer.special_token_ids[s] for role, s in special_roles(tokenizer).items()}
    return transformers.LlamaConfig(
        vocab_size=model.vocab_size,
        hidden_size=model.n_embd,
        intermediate_size=model.mlp_hidden,
        num_hidden_layers=model.n_layer,
        num_attention_heads=model.n_head,
        num_key_value_heads=model.n_head,
        head_dim=model.head_dim,
        hidden_act="silu",
        max_position_embeddings=model.context_length,
        rms_norm_eps=1e-6,  # packlm.model.transformer.RMSNorm's default
        rope_theta=float(model.rope_base),  # plain RoPE, no scaling (transformers 4 and 5)
        attention_bias=False,
        mlp_bias=False,
        attention_dropout=0.0,
        tie_word_embeddings=model.tie_embeddings,
        bos_token_id=ids["bos_token"],
        eos_token_id=ids["eos_token"],
        pad_token_id=ids["pad_token"],
        architectures=["LlamaForCausalLM"],
    )


def llama_state_dict(
    weights: dict[str, torch.Tensor], model: ModelConfig
) -> dict[str, torch.Tensor]:
    """packlm Transformer weights (keys without the Lightning "model." prefix) -> Llama's."""
    C, H = model.n_embd, model.mlp_hidden
    out = {
        "model.embed_tokens.weight": weights["wte.weight"],
        "model.norm.weight": weights["norm_f.weight"],
        "lm_head.weight": weights["wte.weight" if model.tie_embeddings else "lm_head.weight"],
    }
    for i in range(model.n_layer):
        src, dst = f"blocks.{i}.", f"model.layers.{i}."
        q, k, v = weights[src + "attn.qkv.weight"].split(C, dim=0)  # [C, C] each
        gate, up = weights[src + "mlp.gate_up.weight"].split(H, dim=0)  # [H, C] each
        out.update({
            dst + "input_layernorm.weight": weights[src + "norm1.weight"],
            dst + "post_attention_layernorm.weight": weights[src + "norm2.weight"],
            dst + "self_attn.q_proj.weight": q,
            dst + "self_attn.k_proj.weight": k,
            dst + "self_attn.v_proj.weight": v,
            dst + "self_attn.o_proj.weight": weights[src + "attn.proj.weight"],
            dst + "mlp.gate_proj.weight": gate,
            dst + "mlp.up_proj.weight": up,
            dst + "mlp.down_proj.weight": weights[src + "mlp.down.weight"],
        })  # fmt: skip
    return {k: v.contiguous() for k, v in out.items()}


def tokenizer_config(tokenizer, model: ModelConfig) -> dict[str, Any]:
    """tokenizer_config.json: what AutoTokenizer needs besides tokenizer.json; with the chat
    tokens among the special tokens, the chat template training rendered conversations with
    (`packlm.tokenizer.chat`: apply_chat_template gives the same ids)."""
    chat = all(t in tokenizer.special_token_ids for t in CHAT_TOKENS)
    return {
        "tokenizer_class": "PreTrainedTokenizerFast",
        **special_roles(tokenizer),
        "add_bos_token": False,  # packlm never prepends one when encoding
        "add_eos_token": False,
        "model_max_length": model.context_length,
        "clean_up_tokenization_spaces": False,
        **({"chat_template": HF_CHAT_TEMPLATE} if chat else {}),
    }


def not_llama(model: ModelConfig) -> list[str]:
    """The model options LlamaForCausalLM cannot express, as `key=value`."""
    refused = [f"model.mlp={model.mlp}"] if model.mlp != "swiglu" else []
    refused += ["model.qk_norm=true"] if model.qk_norm else []
    refused += [f"model.logit_softcap={model.logit_softcap}"] if model.logit_softcap else []
    return refused + (["model.residual_scalars=true"] if model.residual_scalars else [])


def export_hf(weights: dict[str, torch.Tensor], model: ModelConfig, tokenizer, out: Path) -> None:
    """Write config.json, model.safetensors, generation_config.json, tokenizer.json and
    tokenizer_config.json into the (temporary) folder `out`."""
    refused = not_llama(model)
    if refused:
        raise ConfigError(
            f"format=hf: the checkpoint's {', '.join(refused)} has no LlamaForCausalLM "
            "equivalent; format=hf exports models trained without it"
        )
    transformers = require_hf()
    if tokenizer.vocab_size > model.vocab_size:
        raise ValueError(
            f"the tokenizer has {tokenizer.vocab_size} ids but model.vocab_size={model.vocab_size}"
        )
    config = llama_config(model, tokenizer)
    with torch.device("meta"):
        llama = transformers.LlamaForCausalLM(config)
    state = llama_state_dict(weights, model)
    llama.load_state_dict(state, strict=True, assign=True)  # every tensor mapped, none left
    if model.tie_embeddings:
        llama.tie_weights()
    llama.generation_config.update(
        bos_token_id=config.bos_token_id, eos_token_id=config.eos_token_id,
        pad_token_id=config.pad_token_id,
    )  # fmt: skip
    llama.save_pretrained(out, safe_serialization=True)
    tokenizer.save_hf(out / "tokenizer.json")
    config_json = json.dumps(tokenizer_config(tokenizer, model), indent=2) + "\n"
    write_atomic(out / "tokenizer_config.json", config_json)
    # the packlm model config, for the record (dropout, attention backend: not in Llama's)
    write_atomic(out / "packlm_model.json", json.dumps(as_dict(model), indent=2) + "\n")
