"""packlm: how text becomes training samples for a causal language model, done exactly."""

__version__ = "0.1.0"
