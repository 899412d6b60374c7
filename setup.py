"""Builds the optional C merge loop of the tokenizer; packlm works without it (pure Python)."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "packlm.tokenizer.training._bpe",
            ["src/packlm/tokenizer/training/_bpe.c"],
            optional=True,
        )
    ]
)
