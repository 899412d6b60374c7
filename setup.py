"""Builds the tokenizer's optional C parts (the merge loop, loading files); packlm works
without them (pure Python, the same results)."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "packlm.tokenizer.training._bpe",
            [
                "src/packlm/tokenizer/training/_bpe.c",
                "src/packlm/tokenizer/training/_count.c",
            ],
            optional=True,
        ),
        Extension(
            "packlm.tokenizer._load",
            [
                "src/packlm/tokenizer/_load.c",
                "src/packlm/tokenizer/_load_check.c",
                "src/packlm/tokenizer/_load_tiktoken.c",
            ],
            optional=True,
        ),
    ]
)
