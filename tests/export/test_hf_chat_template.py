"""format=hf writes the chat template training rendered conversations with:
transformers' apply_chat_template gives packlm's ids, id for id, over random conversations
(content starting with newlines or spaces). Content holding a special token's text is the
one exception: packlm encodes it as text, a Hugging Face tokenizer given the rendered string
as the control token (test_typed_control_tokens_are_text_in_packlm_only)."""

from __future__ import annotations

import json

import pytest
from hydra import compose, initialize_config_dir
from hypothesis import given, settings
from hypothesis import strategies as st

from helpers.exports import write_checkpoint
from packlm.config.schema import CONFIG_DIR
from packlm.tokenizer import Tokenizer, train_bpe_from_iterator
from packlm.tokenizer.chat import IM_END, IM_START, ROLES, ChatFormat, render_text

transformers = pytest.importorskip("transformers")
pytest.importorskip("safetensors")

SPECIALS = ["<|endoftext|>", "<|pad|>", IM_START, IM_END]
TRAIN = [render_text([("system", "Be brief."), ("user", "What is 2 + 2?\n\n  Think."),
                      ("assistant", "  4\n\n\nsure"), ("tool", "{\"x\": 1}")])] * 20  # fmt: skip


def export(tmp_path, tokenizer):
    from packlm.commands.export.__main__ import export as run

    ckpt = tmp_path / "last.ckpt"
    write_checkpoint(ckpt, tokenizer)
    out = tmp_path / "hf"
    with initialize_config_dir(CONFIG_DIR, version_base=None):
        run(compose("export", overrides=["format=hf", f"ckpt_path={ckpt}", f"out={out}"]))
    return out


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    vocab, merges = train_bpe_from_iterator(TRAIN, 340, SPECIALS, num_workers=1)
    tok = Tokenizer(vocab, merges, SPECIALS)
    out = export(tmp_path_factory.mktemp("chat"), tok)
    return tok, transformers.AutoTokenizer.from_pretrained(out, local_files_only=True)


content = st.lists(
    st.sampled_from(["\n", "\n\n", " ", "  ", "\t", "a", "b", "4", "é", "日", "'s", "?",
                     "<|im", "_end|", "|>", "\r\n"]),
    max_size=12,
).map("".join)  # fmt: skip
conversations = st.lists(st.tuples(st.sampled_from(ROLES), content), min_size=1, max_size=5)


@settings(max_examples=120, deadline=None)
@given(conversation=conversations, generation=st.booleans())
def test_apply_chat_template_gives_packlms_ids(exported, conversation, generation):
    tok, hf = exported
    chat = ChatFormat.of(tok)
    messages = [{"role": r, "content": c} for r, c in conversation]
    if generation:
        ours = chat.generation_prompt(conversation, tok.encode_ordinary)
    else:
        ours = chat.render(conversation, tok.encode_ordinary)[0]
    text = hf.apply_chat_template(messages, tokenize=False, add_generation_prompt=generation)
    theirs = hf.apply_chat_template(messages, tokenize=True, add_generation_prompt=generation)
    theirs = theirs["input_ids"] if hasattr(theirs, "keys") else theirs  # a BatchEncoding in 5.x
    assert text == render_text(conversation) + (f"{IM_START}assistant\n" if generation else "")
    assert list(theirs) == ours


def test_no_chat_template_without_the_chat_tokens(tmp_path, tiny_tokenizer):
    out = export(tmp_path, tiny_tokenizer)
    config = json.loads((out / "tokenizer_config.json").read_text(encoding="utf-8"))
    assert "chat_template" not in config


def test_typed_control_tokens_are_text_in_packlm_only(exported):
    tok, hf = exported
    chat = ChatFormat.of(tok)
    conversation = [("user", f"say {IM_END}"), ("assistant", "ok")]
    ours = chat.render(conversation, tok.encode_ordinary)[0]
    theirs = hf.apply_chat_template([{"role": r, "content": c} for r, c in conversation],
                                    tokenize=True, return_dict=False)  # fmt: skip
    assert ours.count(chat.end_id) == 2 and list(theirs).count(chat.end_id) == 3


@settings(max_examples=40, deadline=None)
@given(conversation=conversations, cases=st.lists(st.sampled_from([str.upper, str.title, str]), min_size=5, max_size=5),
       pads=st.lists(st.sampled_from(["", " ", "\t", " \n"]), min_size=5, max_size=5))  # fmt: skip
def test_a_role_in_another_case_or_padded_renders_as_packlm_reads_it(
    exported, conversation, cases, pads
):
    """packlm reads `Assistant` or ' user' as assistant / user; the template does the same."""
    tok, hf = exported
    messages = [{"role": pad + case(r) + pad, "content": c}
                for (r, c), case, pad in zip(conversation, cases, pads, strict=False)]  # fmt: skip
    theirs = hf.apply_chat_template(messages, tokenize=True, return_dict=False)
    assert list(theirs) == ChatFormat.of(tok).render(conversation, tok.encode_ordinary)[0]
