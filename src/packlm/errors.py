"""Errors shared by every part of packlm."""


class ConfigError(ValueError):
    """An invalid configuration value; the message starts with the full key name."""
