"""The Transformer on packed rows: DESIGN invariants 1, 2 and 4 at the model level."""

from __future__ import annotations

import math
import warnings

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from helpers.models import PAD, V, cat_rows, pack_row, random_docs, tiny_model
from packlm.model import ModelConfig, Transformer


def sum_ce(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(
        logits.flatten(0, 1), labels.flatten(), ignore_index=-100, reduction="sum"
    )


def run(model, batch):
    return model(batch["input_ids"], batch["segment_ids"], batch["position_ids"])


def grads(model) -> dict[str, torch.Tensor]:
    return {n: p.grad.clone() for n, p in model.named_parameters()}


# every CPU attention path: auto takes matmul for short rows, SDPA for long ones
backends = pytest.mark.parametrize("attention", ["sdpa", "matmul"])
# the model options of the small-LM recipes (model.qk_norm, mlp, zero_init_proj), each and all
OPTIONS = [
    {},
    {"qk_norm": True},
    {"mlp": "relu2"},
    {"zero_init_proj": True},
    {"logit_softcap": 3.0},
    {"residual_scalars": True},
    {"qk_norm": True, "mlp": "relu2", "zero_init_proj": True, "residual_scalars": True},
]
options = pytest.mark.parametrize("options", OPTIONS, ids=lambda o: ",".join(o) or "default")


@backends
@options
@pytest.mark.parametrize("lengths", [[5, 7, 3], [1, 1, 9, 4], [16]])
def test_packed_row_equals_each_document_alone(lengths, attention, options):
    """Invariant 1: logits and gradients (float64, atol 1e-5)."""
    model = tiny_model(attention=attention, **options)
    if options.get("residual_scalars"):  # the embedding's path into every block, in use
        with torch.no_grad():
            model.x0_scalars.fill_(0.5)
    docs = random_docs(lengths, seed=len(lengths))
    packed = cat_rows(pack_row(docs, T=16 + 3), pack_row(docs[::-1], T=16 + 3))  # PAD at the end
    logits = run(model, packed)  # [2, T, V]
    sum_ce(logits, packed["labels"]).backward()
    packed_grads = grads(model)

    model.zero_grad()
    start = 0
    for doc in docs:
        alone = pack_row([doc], T=len(doc))
        alone_logits = model(alone["input_ids"])  # no segments, positions 0..n-1
        torch.testing.assert_close(
            logits[0, start : start + len(doc)], alone_logits[0], atol=1e-5, rtol=0
        )
        sum_ce(alone_logits, alone["labels"]).backward()  # grads accumulate over documents
        start += len(doc)
    alone_grads = grads(model)
    for name, g in packed_grads.items():
        # the packed batch holds every document twice (two rows)
        torch.testing.assert_close(g, 2 * alone_grads[name], atol=1e-5, rtol=0, msg=name)


@given(st.lists(st.integers(min_value=1, max_value=8), min_size=1, max_size=4), st.integers(0, 5))
@settings(max_examples=15, deadline=None)
def test_packed_logits_property(lengths, n_pad):
    model = tiny_model(seed=1)
    docs = random_docs(lengths, seed=sum(lengths))
    packed = pack_row(docs, T=sum(lengths) + n_pad)
    logits = run(model, packed)[0]
    assert torch.isfinite(logits).all()
    start = 0
    for doc in docs:
        alone = model(torch.tensor([doc]))[0]
        torch.testing.assert_close(logits[start : start + len(doc)], alone, atol=1e-5, rtol=0)
        start += len(doc)


@backends
@options
def test_later_document_changes_no_earlier_logit(attention, options):
    """Invariant 2, and causality inside a document."""
    model = tiny_model(attention=attention, **options)
    if options.get("zero_init_proj"):  # else every block starts as the identity: no mixing
        with torch.no_grad():
            for block in model.blocks:
                block.attn.proj.weight.normal_(0, 0.02)
                block.mlp.down.weight.normal_(0, 0.02)
    docs = random_docs([6, 5, 4], seed=3)
    a = run(model, pack_row(docs, T=16))[0]
    changed = [docs[0], [(t + 1) % PAD for t in docs[1]], docs[2][:2]]  # doc 1 edited, doc 2 cut
    b = run(model, pack_row(changed, T=16))[0]
    assert torch.equal(a[:6], b[:6])  # earlier document: bit-identical
    assert not torch.allclose(a[6:11], b[6:11])  # (sanity: the edit is visible where it should be)
    edited_tail = [docs[0][:3] + [(t + 7) % PAD for t in docs[0][3:]], docs[1], docs[2]]
    c = run(model, pack_row(edited_tail, T=16))[0]
    assert torch.equal(a[:3], c[:3])  # later tokens of the same document
    torch.testing.assert_close(a[6:], c[6:], atol=1e-12, rtol=0)  # other documents unaffected


@backends
def test_ignored_positions_pass_no_gradient(attention):
    """Invariant 4: PAD tokens and ignored targets contribute nothing to loss or gradient."""
    model = tiny_model(attention=attention)
    batch = pack_row(random_docs([5, 4], seed=4), T=13)  # 4 PAD at the end
    captured = {}

    def keep(module, args, out):
        out.retain_grad()
        captured["emb"] = out

    model.wte.register_forward_hook(keep)
    logits = run(model, batch)
    logits.retain_grad()
    sum_ce(logits, batch["labels"]).backward()
    ignored = batch["labels"][0] == -100  # each document's last token and every PAD
    assert ignored.sum() == 2 + 4
    assert torch.equal(logits.grad[0, ignored], torch.zeros_like(logits.grad[0, ignored]))
    # an ignored position that is no earlier token's key gets no gradient into its input either
    assert torch.equal(
        captured["emb"].grad[0, ignored], torch.zeros_like(captured["emb"].grad[0, ignored])
    )

    # whatever sits at PAD positions changes no real logit
    noisy = dict(batch, input_ids=batch["input_ids"].clone())
    noisy["input_ids"][0, 9:] = torch.tensor([1, 2, 3, 4])
    real = batch["segment_ids"][0] >= 0
    assert torch.equal(run(model, batch)[0, real], run(model, noisy)[0, real])


@backends
def test_all_pad_rows_and_zero_targets_are_finite(attention):
    model = tiny_model(dtype=torch.float32, attention=attention)
    batch = cat_rows(pack_row([], T=8), pack_row([[1, 2, 3]], T=8))
    batch["labels"][:] = -100  # zero supervised targets
    logits = run(model, batch)
    assert torch.isfinite(logits).all()
    loss = sum_ce(logits, batch["labels"])
    assert loss.item() == 0.0
    loss.backward()
    assert all(torch.isfinite(p.grad).all() and not p.grad.any() for p in model.parameters())


@backends
def test_stream_rows_equal_no_segments(attention):
    model = tiny_model(attention=attention)
    ids = torch.randint(0, V, (2, 10))
    zeros = torch.zeros(2, 10, dtype=torch.int32)
    torch.testing.assert_close(model(ids, zeros), model(ids), atol=0, rtol=0)
    one_doc_by_mask = model(ids, torch.cat([zeros, -torch.ones(2, 1, dtype=torch.int32)], 1)[:, 1:])
    # the same row through the dense-mask path (one trailing PAD forces it)
    torch.testing.assert_close(one_doc_by_mask[:, :9], model(ids[:, :9]), atol=1e-10, rtol=0)


def test_initial_loss_is_about_ln_vocab():
    torch.manual_seed(0)
    cfg = ModelConfig(vocab_size=512, context_length=64)  # default width and depth
    model = Transformer(cfg)
    ids, targets = torch.randint(0, 512, (2, 2, 64))
    loss = F.cross_entropy(model(ids).flatten(0, 1), targets.flatten())
    assert abs(loss.item() - math.log(512)) < 0.1


def test_tied_embeddings_and_scaled_init():
    model = tiny_model(dtype=torch.float32, n_layer=8, tie_embeddings=True)
    assert model.lm_head.weight is model.wte.weight
    std_qkv = model.blocks[0].attn.qkv.weight.std().item()
    std_proj = model.blocks[0].attn.proj.weight.std().item()
    assert std_proj == pytest.approx(std_qkv / 4, rel=0.15)  # 1/sqrt(2 * 8)
    untied = Transformer(ModelConfig(vocab_size=V, n_embd=32, n_head=4))  # the default
    assert untied.lm_head.weight is not untied.wte.weight


def test_flex_forward_matches_sdpa_on_cpu():
    sdpa = tiny_model(dtype=torch.float32, seed=2)
    flex = tiny_model(dtype=torch.float32, seed=2, attention="flex")
    batch = cat_rows(pack_row(random_docs([4, 6, 3], 5), T=16), pack_row(random_docs([9], 6), T=16))
    try:
        with warnings.catch_warnings(), torch.no_grad():  # CPU flex: forward only
            warnings.filterwarnings("ignore", "flex_attention called without torch.compile")
            got = run(flex, batch)
    except Exception as err:  # pragma: no cover - depends on the torch build
        pytest.skip(f"FlexAttention forward does not run on CPU here: {err}")
    with torch.no_grad():
        torch.testing.assert_close(got, run(sdpa, batch), atol=1e-5, rtol=1e-5)


@pytest.mark.slow
def test_compiled_model_matches_eager_on_packed_rows():
    """model.compile: the compiled graph (dense mask, no graph break) computes the eager
    function, so invariant 1 carries over; logits and gradients in float32."""
    pytest.importorskip("torch._inductor")
    eager = tiny_model(dtype=torch.float32, seed=3)
    compiled_copy = tiny_model(dtype=torch.float32, seed=3)
    compiled = torch.compile(compiled_copy)
    batch = cat_rows(
        pack_row(random_docs([5, 7, 3], 7), T=18), pack_row(random_docs([16], 8), T=18)
    )
    want, got = run(eager, batch), run(compiled, batch)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    sum_ce(want, batch["labels"]).backward()
    sum_ce(got, batch["labels"]).backward()
    for (name, g), g_compiled in zip(
        grads(eager).items(), grads(compiled_copy).values(), strict=True
    ):
        torch.testing.assert_close(g_compiled, g, atol=1e-5, rtol=1e-4, msg=name)


def test_recipe_options_shapes_and_init():
    """relu2 has SwiGLU's parameters (hidden 1.5x, two matrices); qk_norm adds two gains of
    the head width per block; zero_init_proj zeroes only the residual projections, drawing
    the same random numbers for the rest."""
    base = tiny_model(dtype=torch.float32)
    relu2 = tiny_model(dtype=torch.float32, mlp="relu2")
    assert relu2.num_parameters() == base.num_parameters()
    assert base.blocks[0].mlp.gate_up.weight.shape == (2 * 96, 32)  # 8/3 x 32 -> 96
    assert relu2.blocks[0].mlp.up.weight.shape == (144, 32)  # 1.5 x 96
    qk = tiny_model(dtype=torch.float32, qk_norm=True)
    assert qk.num_parameters() == base.num_parameters() + 2 * 2 * 8  # 2 blocks, head width 8
    zero = tiny_model(dtype=torch.float32, zero_init_proj=True)
    for a, b in zip(base.blocks, zero.blocks, strict=True):
        assert not b.attn.proj.weight.any() and not b.mlp.down.weight.any()
        assert torch.equal(a.attn.qkv.weight, b.attn.qkv.weight)
    ids = torch.randint(0, V, (2, 12))
    loss = F.cross_entropy(zero(ids).flatten(0, 1), ids.flatten())
    loss.backward()
    assert zero.blocks[0].attn.proj.weight.grad.abs().sum() > 0  # it learns from step one
    with pytest.raises(Exception, match=r"model.mlp='gelu': allowed \['swiglu', 'relu2'\]"):
        ModelConfig(mlp="gelu").validate()
    with pytest.raises(Exception, match=r"model.logit_softcap=0: a positive number, or null"):
        ModelConfig(logit_softcap=0).validate()
    capped = tiny_model(dtype=torch.float32, logit_softcap=0.5)
    assert capped(ids).abs().max() < 0.5
    scalars = tiny_model(dtype=torch.float32, residual_scalars=True)
    assert scalars.num_parameters() == base.num_parameters() + 2 * 2  # a pair per layer
    torch.testing.assert_close(scalars(ids), base(ids))  # (1, 0) at the start: the same model
