"""tiktoken and Hugging Face tokenizers pre-tokenize as `regex` does even for characters
their Unicode tables class differently (letters of recent Unicode versions): the pattern's
classes are rewritten."""

from __future__ import annotations

import json

import numpy as np
import pytest
import regex

from packlm.tokenizer import Tokenizer, engine_pattern, tiktoken_engine, train_bpe_from_iterator
from packlm.tokenizer.pretokenize import CL100K_PATTERN, GPT2_PATTERN

CLASSES = [r"\p{L}", r"\p{N}", r"\s", r"\p{Ll}", r"\p{Lo}", r"\p{M}", r"\d", r"\w"]


def regex_members(cls: str) -> set[str]:
    return set("".join(regex.findall(f"(?:{cls})+", engine_pattern._every_character())))


def differing(cls: str, engine: str = "tiktoken") -> list[str]:
    """Characters `regex` and the engine's own tables put on different sides of `cls`, each
    engine matching every character."""
    members = engine_pattern.ENGINES[engine][1]
    return sorted(regex_members(cls) ^ set(members(cls)))


def engine_or_skip(engine: str) -> None:
    pytest.importorskip(engine_pattern.ENGINES[engine][0])


@pytest.mark.parametrize(
    "engine, cls",
    [*(("tiktoken", c) for c in CLASSES), ("hf", r"\p{L}"), ("hf", r"\p{Ll}")],  # hf: 2 s each
)
def test_rewritten_class_has_the_regex_members(engine, cls):
    engine_or_skip(engine)
    fixed = engine_pattern._aligned(cls, engine)
    assert fixed is not None
    members = engine_pattern.ENGINES[engine][1]
    assert set(members(fixed)) == regex_members(cls)
    assert (fixed == cls) == (not differing(cls, engine))  # rewritten only where they differ


def test_negated_and_bracketed_classes_are_rewritten():
    engine_or_skip("tiktoken")
    if not differing(r"\p{L}"):
        pytest.skip("regex and tiktoken share the Unicode letters here")
    # a letter tiktoken does not know, in and out of brackets and negated
    new = differing(r"\p{L}")[0]
    for pattern in (r"\p{L}+|[\s\S]", r"[^\s\p{N}\p{L}]+|\P{L}+|[\s\S]", r"\pL+|[\s\S]"):
        rust = engine_pattern.for_engine(pattern, "tiktoken")
        assert rust is not None and rust != pattern
        probe = f"a{new}b 1 ;{new}; \\"
        expected = regex.findall(pattern, probe)
        assert rust_split(rust, probe, expected) == expected


def test_escaped_backslash_is_not_a_class():
    engine_or_skip("tiktoken")
    assert engine_pattern.for_engine(r"\\p{L}|[\s\S]", "tiktoken").startswith(r"\\p{L}")


def rust_split(pattern: str, text: str, pieces: list[str]) -> list[str]:
    """tiktoken's pre-tokens of `text` with `pattern`, where `pieces` are the expected ones
    (each made a token, so that each comes back as one id when tiktoken splits the same)."""
    import tiktoken

    ranks = {bytes([b]): b for b in range(256)}
    for p in sorted(set(pieces)):
        ranks.setdefault(p.encode(), len(ranks))
    back = {i: t for t, i in ranks.items()}
    enc = tiktoken.Encoding("split", pat_str=pattern, mergeable_ranks=ranks, special_tokens={})
    return [back[i].decode(errors="replace") for i in enc.encode_ordinary(text)]


@pytest.mark.parametrize("pattern", ["gpt2", "cl100k"])
def test_engines_agree_on_letters_of_recent_unicode(stdlib_docs, pattern):
    tiktoken = pytest.importorskip("tiktoken")
    letters = differing(r"\p{L}") + differing(r"\p{N}")
    if not letters:
        pytest.skip("regex and tiktoken share the Unicode tables of these classes here")
    docs = [*stdlib_docs[:6], "it's Bob's " * 50]  # "'s" becomes a token
    vocab, merges = train_bpe_from_iterator(docs, 600, [], pattern=pattern, num_workers=1)
    fast = Tokenizer(vocab, merges, pattern=pattern, engine="tiktoken")
    pure = Tokenizer(vocab, merges, pattern=pattern, engine="python")
    sample = letters[:: max(1, len(letters) // 200)]  # spread over every range
    text = " ".join(f"{c}'s x{c}1 {c}{c}? {c}ing" for c in sample) + "".join(stdlib_docs[6:8])
    assert fast.encode(text) == pure.encode(text)
    assert fast.engine == "tiktoken"
    # the text does reach the gap: with the pattern as written, tiktoken gives other ids
    raw = tiktoken.Encoding("raw", pat_str=pure.pattern_regex, special_tokens={},
                            mergeable_ranks=fast._tiktoken_ranks())  # fmt: skip
    assert raw.encode_ordinary(text) != pure.encode(text)


CUSTOM = [r"\p{L}+|[\s\S]", r"[^\s\p{N}\pL]+|\P{L}+|\S|\\p{L}|[\s\S]", r"\p{Ll}+|\p{Lo}+|[\s\S]"]


@pytest.mark.parametrize("engine", ["tiktoken", "hf"])
def test_original_undoes_the_rewrite(engine):
    engine_or_skip(engine)
    patterns = [GPT2_PATTERN, CL100K_PATTERN, *CUSTOM]
    rewritten = [engine_pattern.for_engine(p, engine) for p in patterns]
    assert None not in rewritten  # the built-in patterns always get one
    assert [engine_pattern.original(p) for p in rewritten] == patterns


def test_hf_tokenizer_json_splits_letters_of_recent_unicode_as_packlm(stdlib_docs):
    tokenizers = pytest.importorskip("tokenizers")
    from packlm.tokenizer.hf import tokenizer_json

    letters = differing(r"\p{L}", "hf")
    if not letters:
        pytest.skip("regex and tokenizers share the Unicode letters here")
    vocab, merges = train_bpe_from_iterator([*stdlib_docs[:6], "it's Bob's " * 50], 600, [],
                                            num_workers=1)  # fmt: skip
    tok = Tokenizer(vocab, merges)
    hf = tokenizers.Tokenizer.from_str(json.dumps(tokenizer_json(tok)))
    text = " ".join(f"{c}'s x{c}1 {c}{c}? {c}ing" for c in letters[:: len(letters) // 100])
    assert hf.encode(text).ids == tok.encode(text)


def test_results_are_kept_on_disk_and_a_bad_file_is_recomputed(tmp_path, monkeypatch):
    engine_or_skip("tiktoken")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    pattern = r"\p{N}+|\p{L}+|[\s\S]"
    engine_pattern.for_engine.cache_clear()
    first = engine_pattern.for_engine(pattern, "tiktoken")
    (stored,) = engine_pattern.store_dir().glob("*.json")
    assert stored.parent == tmp_path / "packlm" / "engine_patterns"

    def no_probe(*args):
        raise AssertionError("probed although a stored result exists")

    engine_pattern.for_engine.cache_clear()
    monkeypatch.setattr(engine_pattern, "_rewrite", no_probe)
    assert engine_pattern.for_engine(pattern, "tiktoken") == first  # read, not probed
    monkeypatch.undo()
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    for damage in ("{not json", json.dumps({"key": {}, "rewritten": "x"})):  # torn, foreign
        stored.write_text(damage)
        engine_pattern.for_engine.cache_clear()
        assert engine_pattern.for_engine(pattern, "tiktoken") == first
        assert json.loads(stored.read_text())["rewritten"] == first  # rewritten whole
    assert [p.name for p in stored.parent.iterdir()] == [stored.name]  # no temporary left
    engine_pattern.for_engine.cache_clear()


def test_an_unwritable_store_only_costs_time(tmp_path, monkeypatch):
    engine_or_skip("tiktoken")
    (tmp_path / "packlm").write_text("a file where the folder would go")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    engine_pattern.for_engine.cache_clear()
    assert engine_pattern.for_engine(r"\p{L}+|[\s\S]", "tiktoken") is not None
    engine_pattern.for_engine.cache_clear()


def test_hf_json_without_tokenizers_keeps_the_pattern_and_says_so(small_tokenizer, monkeypatch,
                                                                  caplog):  # fmt: skip
    from packlm.tokenizer import hf

    monkeypatch.setattr(hf, "for_engine", lambda pattern, engine: None)  # as without tokenizers
    with caplog.at_level("WARNING", logger="packlm.tokenizer.hf"):
        spec = hf.tokenizer_json(small_tokenizer)
    split = spec["pre_tokenizer"]["pretokenizers"][0]
    assert split["pattern"]["Regex"] == small_tokenizer.pattern_regex
    assert "packlm[hf]" in caplog.text


@pytest.fixture
def empty_store(tmp_path, monkeypatch):
    """A machine where no probe result is kept yet (for_engine's in-memory cache cleared)."""
    engine_or_skip("tiktoken")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    engine_pattern.for_engine.cache_clear()
    yield engine_pattern.store_dir()
    engine_pattern.for_engine.cache_clear()


def counting_probes(monkeypatch) -> list[str]:
    """The patterns probed over all of Unicode from now on."""
    probed, rewrite = [], engine_pattern._rewrite

    def counted(pattern, engine):
        probed.append(pattern)
        return rewrite(pattern, engine)

    monkeypatch.setattr(engine_pattern, "_rewrite", counted)
    return probed


def test_seen_characters_find_the_probe_s_differences_among_the_characters_checked():
    engine_or_skip("tiktoken")
    classes = [r"\p{L}", r"\p{N}", r"\s"]  # GPT-2's
    differ = {cls: set(differing(cls)) for cls in classes}
    disputed = set().union(*differ.values())
    rng = np.random.default_rng(0)
    every = engine_pattern._every_character()
    seen = engine_pattern.SeenCharacters(GPT2_PATTERN, "tiktoken")
    checked: set[str] = set()
    for _ in range(40):
        text = "".join(every[i] for i in rng.integers(0, len(every), 300))
        if disputed and rng.random() < 0.5:
            text += rng.choice(sorted(disputed))
        new = set(text) - checked
        assert seen.check(text) == (not new & disputed)  # False: new characters in dispute
        checked |= new
    assert {chr(c) for c in np.flatnonzero(seen.checked)} == checked
    for cls in classes:  # what was found is what the probe of all of Unicode finds there
        missing, surplus = set(seen.missing[cls]), set(seen.surplus[cls])
        assert missing | surplus == differ[cls] & checked and not missing & surplus
        assert missing <= regex_members(cls) and not surplus & regex_members(cls)
    rewritten = seen.rewritten()  # splits every character checked as regex does
    sample = "".join(sorted(checked)) + " a1 " + "".join(sorted(checked & disputed))
    expected = regex.findall(GPT2_PATTERN, sample)
    assert rust_split(rewritten, sample, expected) == expected
    assert (rewritten == GPT2_PATTERN) == (not checked & disputed)


def test_a_first_load_on_a_machine_never_probes_all_of_unicode_for_a_few_texts(
    empty_store, monkeypatch, small_vocab
):
    letters = differing(r"\p{L}")
    if len(letters) < 2:
        pytest.skip("regex and tiktoken share the Unicode letters here")
    probed = counting_probes(monkeypatch)
    vocab, merges = small_vocab
    tok, pure = (Tokenizer(vocab, merges, engine=e) for e in ("auto", "python"))
    texts = [
        "def f(x):\n    return x  # ASCII",
        "naïve café — Straße, 東京 1½ ٣",
        f"x{letters[0]}y",  # a letter tiktoken does not know: added to \p{L} in its pattern
        f"{letters[-1]}{letters[0]} 12 and [{letters[-1]}]",  # another one
    ]
    built = []
    encoding = tiktoken_engine._encoding
    monkeypatch.setattr(tiktoken_engine, "_encoding", lambda *a: built.append(a[2]) or encoding(*a))
    for i, text in enumerate(texts):
        assert tok.encode(text) == pure.encode(text)
        assert tok.engine == "tiktoken"
        assert len(built) == [1, 1, 2, 3][i]  # built at the first text, again for each letter
    assert probed == [] and not empty_store.exists()
    first, last = (f"\\x{{{ord(c):X}}}" for c in (letters[0], letters[-1]))  # as written
    assert first in built[1] and last in built[2] and last not in built[1]
    assert [tok.encode(t) for t in texts] == [pure.encode(t) for t in texts]
    again = Tokenizer(vocab, merges)  # nothing kept: a later load checks its texts again
    assert again.encode(texts[3]) == pure.encode(texts[3]) and probed == []
    assert isinstance(again._encoder, tiktoken_engine.CheckedTiktoken)
    assert len(built) == 4  # the first text with such letters: one build, not two


def test_a_fixed_class_tiktoken_does_not_read_runs_the_probe(empty_store, monkeypatch,
                                                             small_vocab):  # fmt: skip
    letters = differing(r"\p{L}")
    if not letters:
        pytest.skip("regex and tiktoken share the Unicode letters here")
    probed = counting_probes(monkeypatch)
    tok = Tokenizer(*small_vocab)
    assert tok.encode("plain") and probed == []
    monkeypatch.setattr(engine_pattern.SeenCharacters, "rewritten", lambda self: None)
    text = f"x{letters[0]}y"
    assert tok.encode(text) == Tokenizer(*small_vocab, engine="python").encode(text)
    assert probed == [tok.pattern_regex] and tok._encoder.final is not None


def test_looking_up_more_characters_than_the_probe_costs_runs_the_probe(
    empty_store, monkeypatch, small_vocab
):
    probed = counting_probes(monkeypatch)
    monkeypatch.setattr(tiktoken_engine, "LOOKUPS_BEFORE_PROBE", 200)
    tok = Tokenizer(*small_vocab)
    text = "café " * 30
    tok.encode(text)
    tok.encode("ASCII is not looked up " * 10)
    assert probed == []  # 150 looked up
    tok.encode(text)  # 300
    assert probed == [tok.pattern_regex] and tok._encoder.final is not None
    assert tok.encode(text) == Tokenizer(*small_vocab, engine="python").encode(text)


def test_more_builds_than_the_probe_costs_run_the_probe(empty_store, monkeypatch, small_vocab):
    letters = differing(r"\p{L}")
    if len(letters) < 2:
        pytest.skip("regex and tiktoken share the Unicode letters here")
    probed = counting_probes(monkeypatch)
    monkeypatch.setattr(tiktoken_engine, "BUILDS_BEFORE_PROBE", 2)
    tok, pure = Tokenizer(*small_vocab), Tokenizer(*small_vocab, engine="python")
    texts = ["plain", f"a{letters[0]}", f"b{letters[1]}"]  # builds 1, 2, then the probe
    for text, probes in zip(texts, [0, 0, 1], strict=True):
        assert tok.encode(text) == pure.encode(text) and len(probed) == probes
    assert tok._encoder.final is not None and len(list(empty_store.glob("*.json"))) == 1


def test_no_tiktoken_pattern_for_a_text_turns_to_the_python_engine(empty_store, monkeypatch,
                                                                   small_vocab):  # fmt: skip
    tok = Tokenizer(*small_vocab)
    assert tok.encode("plain") and tok.engine == "tiktoken"
    monkeypatch.setattr(
        tiktoken_engine, "tiktoken_encoding", lambda *args: None
    )  # no pattern works
    monkeypatch.setattr(tiktoken_engine, "LOOKUPS_BEFORE_PROBE", 0)
    assert tok.encode("café") == Tokenizer(*small_vocab, engine="python").encode("café")
    assert tok.engine == "python"


def test_engine_tiktoken_probes_at_the_first_encode(empty_store, monkeypatch, small_vocab):
    probed = counting_probes(monkeypatch)
    tok = Tokenizer(*small_vocab, engine="tiktoken")
    tok.encode("ASCII only")
    assert probed == [tok.pattern_regex] and tok.engine == "tiktoken"
