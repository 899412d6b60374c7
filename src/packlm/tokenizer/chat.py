"""The chat format: a conversation -> token ids and a role code per token, in one pass.

The rendering is ChatML's (what Qwen's and many Hugging Face chat templates write):

    <|im_start|>{role}\\n{content}<|im_end|>\\n      for each turn, then the document's EOS

`<|im_start|>` and `<|im_end|>` are special tokens: added to a trained tokenizer's special
tokens (never merged), taken from a loaded tokenizer where it has them (`ChatFormat.of`).
Each piece is encoded once: the two control tokens by id, and each text between two control
tokens by `encode_ordinary` as one piece: "{role}\\n{content}" and the "\\n" after `<|im_end|>`.
Those are exactly the texts a tokenizer of the whole rendered string sees between its
special tokens, so Hugging Face's `apply_chat_template` (the template `python -m
packlm.export format=hf` writes) gives these ids by construction, content starting with
"\\n\\n" or spaces included. A control token's text inside a turn ("<|im_end|>" typed by a
user) is text, never the control token.

Every token gets a role code (uint8), which the token store keeps beside the ids; what is
supervised is decided from the codes at batch time (`supervised_table`), so changing
data.chat_supervised rebuilds nothing:

    0 TEXT       a plain-text document's token: always supervised
    1 MARKUP     `<|im_start|>`, the "{role}\\n" header, the "\\n" after `<|im_end|>`, the EOS
    2..5         a turn's content and its `<|im_end|>`: system, user, assistant, tool

The header's tokens are those "{role}\\n{content}" shares with "{role}\\n" encoded alone; where
the tokenizer joins the header's newline with whitespace that starts the content (one token
"\\n  "), that token is the content's, so every byte of an answer is a target.

By default (`assistant`) the supervised targets are the assistant's content and its
end-of-turn token, so the model learns to stop; `all` supervises every token as plain text.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
CHAT_TOKENS = (IM_START, IM_END)
CHAT_FORMAT = "chatml-2"
"""Part of a chat store's fingerprint: bump it when the rendering changes."""

ROLES = ("system", "user", "assistant", "tool")
TEXT, MARKUP = 0, 1
ROLE_CODES = {role: 2 + k for k, role in enumerate(ROLES)}
CODE_NAMES = ("text", "markup", *ROLES)
SUPERVISED = {"assistant": ("assistant",), "all": ROLES}
"""data.chat_supervised -> the roles whose content and end-of-turn token are targets."""

HF_CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "{{- '<|im_start|>' + (message['role'] | trim | lower) + '\\n' + message['content'] + '<|im_end|>\\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
)
"""`render_text` as a Jinja chat template (tokenizer_config.json's `chat_template`), with
`generation_prompt`'s ending; `apply_chat_template` then gives `render`'s ids. A role is
trimmed and lower-cased, as packlm reads a record's roles (`Assistant` trains as assistant)."""

Turn = tuple[str, str]
"""(role, content), role one of ROLES."""


class ChatTokenError(ValueError):
    """A tokenizer that cannot represent the chat format's control tokens."""


def render_text(turns: Sequence[Turn]) -> str:
    """The conversation as one string (control tokens as their text): what the hash split and
    the tokenizer's training read (a tokenizer never merges across a special token)."""
    return "".join(f"{IM_START}{role}\n{content}{IM_END}\n" for role, content in turns)


def text_bytes(turns: Sequence[Turn]) -> int:
    """UTF-8 bytes the rendered conversation's ordinary tokens decode to (control tokens 0,
    as the store's byte check counts them)."""
    return sum(len(role) + 2 + len(content.encode("utf-8")) for role, content in turns)


def supervised_table(supervised: str) -> np.ndarray:
    """bool [256]: role code -> is a token with it a target (plain text always is)."""
    if supervised not in SUPERVISED:
        raise ValueError(f"supervised={supervised!r}: expected one of {sorted(SUPERVISED)}")
    table = np.zeros(256, dtype=bool)
    table[TEXT] = True
    table[MARKUP] = supervised == "all"
    for role in SUPERVISED[supervised]:
        table[ROLE_CODES[role]] = True
    return table


@dataclass
class ChatFormat:
    """The format's control-token ids in one tokenizer, and its rendering."""

    start_id: int
    end_id: int
    _headers: dict[str, list[int]] = field(default_factory=dict, repr=False, compare=False)
    _newline: list[int] | None = field(default=None, repr=False, compare=False)

    @classmethod
    def of(cls, tokenizer) -> ChatFormat:
        """The ids of `<|im_start|>` / `<|im_end|>` in `tokenizer`: its special tokens, else a
        vocabulary entry with exactly those bytes (a loaded tokenizer's own); else an error."""
        found = []
        for token in CHAT_TOKENS:
            tid = tokenizer.special_token_ids.get(token)
            if tid is None:
                data = token.encode("utf-8")
                tid = next((i for i in range(tokenizer.vocab_size)
                            if tokenizer.token_bytes(i) == data), None)  # fmt: skip
            if tid is None:
                raise ChatTokenError(
                    f"the tokenizer has no token {token!r}, which conversations are rendered "
                    f"with (ChatML); its special tokens are {list(tokenizer.special_token_ids)}"
                )
            found.append(int(tid))
        return cls(*found)

    def render(
        self, turns: Sequence[Turn], encode: Callable[[str], list[int]]
    ) -> tuple[list[int], bytearray]:
        """(ids, role code per id) of the conversation; `encode` is the tokenizer's
        `encode_ordinary`. No EOS: the store appends it (code MARKUP)."""
        ids: list[int] = []
        codes = bytearray()
        if self._newline is None:
            self._newline = encode("\n")
        for role, content in turns:
            header = self._headers.get(role)
            if header is None:
                header = self._headers[role] = encode(role + "\n")
            piece = encode(role + "\n" + content)  # as a whole-string tokenizer sees it
            shared = 0  # the header's tokens: the prefix shared with "{role}\n" alone
            while shared < len(header) and piece[shared] == header[shared]:
                shared += 1
            code = ROLE_CODES[role]
            ids.append(self.start_id)
            ids += piece
            ids.append(self.end_id)
            ids += self._newline
            codes += bytes((MARKUP,)) * (1 + shared)
            codes += bytes((code,)) * (len(piece) - shared + 1)
            codes += bytes((MARKUP,)) * len(self._newline)
        return ids, codes

    def generation_prompt(
        self, turns: Sequence[Turn], encode: Callable[[str], list[int]]
    ) -> list[int]:
        """The ids a model continues to answer: `render(turns)` then `<|im_start|>assistant\\n`
        (Hugging Face's add_generation_prompt); the answer ends at `end_id`."""
        ids, _ = self.render(turns, encode)
        header = self._headers.get("assistant") or encode("assistant\n")
        return [*ids, self.start_id, *header]

    def __getstate__(self) -> dict:  # to worker processes: the ids, not the caches
        return {"start_id": self.start_id, "end_id": self.end_id}

    def __setstate__(self, state: dict) -> None:
        self.__init__(**state)
