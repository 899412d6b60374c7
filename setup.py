"""Builds the tokenizer trainer's optional C part (the merge loop, GPT-2's pre-token
counter); packlm works without it (pure Python, the same results)."""

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
    ]
)
