"""The causal Transformer (plain nn.Module) and its LightningModule.

`LitCausalLM` is imported lazily so `import packlm.model` stays free of Lightning.
"""

from packlm.model.config import ModelConfig, OptimConfig
from packlm.model.transformer import Transformer

__all__ = ["LitCausalLM", "ModelConfig", "OptimConfig", "Transformer"]


def __getattr__(name: str):
    if name == "LitCausalLM":
        from packlm.model.lit_module import LitCausalLM

        return LitCausalLM
    raise AttributeError(f"module 'packlm.model' has no attribute {name!r}")
