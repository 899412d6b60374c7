"""segment_ids -> mask: the rule, its three forms, and positions from segments."""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from packlm.model import masks
from packlm.model.transformer import positions_from_segments


def brute_force(seg: list[int]) -> torch.Tensor:
    """The DESIGN rule, literally."""
    T = len(seg)
    out = torch.zeros(T, T, dtype=torch.bool)
    for i in range(T):
        for j in range(T):
            out[i, j] = (j <= i and seg[i] == seg[j] >= 0) or (seg[i] < 0 and i == j)
    return out


def test_worked_example():
    got = masks.allowed(torch.tensor([[0, 0, 0, 1, 1]]))[0]
    expected = torch.tensor(
        [
            [1, 0, 0, 0, 0],
            [1, 1, 0, 0, 0],
            [1, 1, 1, 0, 0],
            [0, 0, 0, 1, 0],
            [0, 0, 0, 1, 1],
        ],
        dtype=torch.bool,
    )
    assert torch.equal(got, expected)


def test_pad_queries_see_only_themselves_and_are_never_keys():
    seg = torch.tensor([[0, 0, -1, -1, 1, -1]])
    ok = masks.allowed(seg)[0]
    pad = (seg[0] < 0).nonzero().flatten()
    for p in pad.tolist():
        assert ok[p].nonzero().flatten().tolist() == [p]  # query: itself only
        assert ok[:, p].nonzero().flatten().tolist() == [p]  # key: for itself only
    assert ok.any(dim=1).all()  # no empty row


segments = st.lists(st.integers(min_value=-1, max_value=3), min_size=1, max_size=24)


@given(
    st.lists(segments, min_size=1, max_size=3).map(
        lambda rows: [r + [-1] * (24 - len(r)) for r in rows]
    )
)
@settings(max_examples=60, deadline=None)
def test_allowed_matches_the_rule(rows):
    seg = torch.tensor(rows, dtype=torch.int32)
    got = masks.allowed(seg)
    for b, row in enumerate(rows):
        assert torch.equal(got[b], brute_force(row))


def test_additive_mask_has_no_empty_row_and_matches_bool():
    seg = torch.tensor([[0, 0, 1, 1, -1, -1], [-1] * 6], dtype=torch.int32)
    add = masks.additive_mask(seg, torch.float32)  # [B, 1, T, T]
    assert add.shape == (2, 1, 6, 6)
    assert torch.equal(add[:, 0] == 0, masks.allowed(seg))
    q = k = v = torch.randn(2, 3, 6, 8)
    out = masks.attend(q, k, v, masks.AttentionMask(dense=add))
    assert torch.isfinite(out).all()  # all-PAD row included


def test_stream_detection():
    assert masks.is_stream(None)
    assert masks.is_stream(torch.zeros(2, 5, dtype=torch.int32))
    assert not masks.is_stream(torch.tensor([[0, 0, 1]]))
    assert not masks.is_stream(torch.tensor([[0, 0, -1]]))
    assert masks.build_mask(torch.zeros(2, 5, dtype=torch.int32), "sdpa", torch.float32).is_causal


def test_is_causal_equals_dense_mask_for_stream_rows():
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 2, 7, 4, dtype=torch.float64) for _ in range(3))
    zeros = torch.zeros(2, 7, dtype=torch.int32)
    causal = masks.attend(q, k, v, masks.AttentionMask(is_causal=True))
    dense = masks.attend(q, k, v, masks.AttentionMask(dense=masks.additive_mask(zeros, q.dtype)))
    torch.testing.assert_close(causal, dense, atol=1e-12, rtol=0)


def test_resolve_backend():
    cpu = torch.device("cpu")
    assert masks.resolve_backend("auto", cpu) == "sdpa"
    assert masks.resolve_backend("auto", cpu, masks.MATMUL_MAX_T) == "matmul"
    assert masks.resolve_backend("auto", cpu, masks.MATMUL_MAX_T + 1) == "sdpa"
    assert masks.resolve_backend("sdpa", cpu, 16) == "sdpa"
    assert masks.resolve_backend("flex", cpu) == "flex"
    assert masks.resolve_backend("sdpa", torch.device("cuda")) == "sdpa"


def test_resolve_backend_under_medium_float32_matmul_precision():
    """Under "medium" (SDPA's CPU flash kernel slow), auto attends by matmul on CPU up to
    MATMUL_MAX_T_MEDIUM tokens; "high" and "highest" keep MATMUL_MAX_T; an asked backend stays."""
    cpu, before = torch.device("cpu"), torch.get_float32_matmul_precision()
    try:
        torch.set_float32_matmul_precision("medium")
        assert masks.resolve_backend("auto", cpu, masks.MATMUL_MAX_T + 1) == "matmul"
        assert masks.resolve_backend("auto", cpu, masks.MATMUL_MAX_T_MEDIUM) == "matmul"
        assert masks.resolve_backend("auto", cpu, masks.MATMUL_MAX_T_MEDIUM + 1) == "sdpa"
        assert masks.resolve_backend("sdpa", cpu, 16) == "sdpa"
        torch.set_float32_matmul_precision("high")
        assert masks.resolve_backend("auto", cpu, masks.MATMUL_MAX_T + 1) == "sdpa"
    finally:
        torch.set_float32_matmul_precision(before)


@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16])
def test_matmul_attention_matches_sdpa_forward_and_backward(dtype):
    """Packed rows with PAD and stream rows: the matmul backend computes SDPA's function."""
    torch.manual_seed(0)
    seg = torch.tensor([[0] * 5 + [1] * 7 + [-1] * 4, [0] * 3 + [1] * 12 + [-1]], dtype=torch.int32)
    stream = torch.zeros(2, 16, dtype=torch.int32)
    tol = {"atol": 1e-12, "rtol": 0} if dtype == torch.float64 else {"atol": 2e-2, "rtol": 2e-2}
    for rows in (seg, stream):
        q, k, v = (torch.randn(2, 3, 16, 8, dtype=dtype, requires_grad=True) for _ in range(3))
        grad = torch.randn(2, 3, 16, 8, dtype=dtype)
        outs = []
        for backend in ("sdpa", "matmul"):
            mask = masks.build_mask(rows, backend, dtype)
            assert mask.matmul == (backend == "matmul")
            out = masks.attend(q, k, v, mask)
            outs.append((out, *torch.autograd.grad(out, (q, k, v), grad)))
        ref = F.scaled_dot_product_attention(
            q.double(), k.double(), v.double(), attn_mask=masks.allowed(rows)[:, None]
        )
        torch.testing.assert_close(outs[1][0].double(), ref, **tol)
        for sdpa, matmul in zip(*outs, strict=True):
            torch.testing.assert_close(matmul, sdpa, **tol)


def test_flex_matches_sdpa_on_cpu():
    if masks.flex_attention is None:
        pytest.skip("no FlexAttention in this torch")
    torch.manual_seed(0)
    seg = torch.tensor([[0] * 5 + [1] * 7 + [-1] * 4, [0] * 3 + [1] * 13], dtype=torch.int32)
    q, k, v = (torch.randn(2, 2, 16, 8) for _ in range(3))
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", "flex_attention called without torch.compile")
            flex = masks.attend(q, k, v, masks.build_mask(seg, "flex", q.dtype))
    except Exception as err:  # pragma: no cover - depends on the torch build
        pytest.skip(f"FlexAttention does not run on CPU here: {err}")
    sdpa = F.scaled_dot_product_attention(q, k, v, attn_mask=masks.allowed(seg)[:, None])
    torch.testing.assert_close(flex, sdpa, atol=1e-5, rtol=1e-5)


def test_positions_from_segments():
    seg = torch.tensor([[0, 0, 0, 1, 1, -1, -1], [0, 0, 0, 0, 0, 0, 0]])
    pos = positions_from_segments(seg, 2, 7, seg.device)
    assert pos.tolist() == [[0, 1, 2, 0, 1, 0, 1], [0, 1, 2, 3, 4, 5, 6]]
    assert positions_from_segments(None, 1, 3, "cpu").tolist() == [[0, 1, 2]]


def test_mask_building_does_not_break_a_compiled_graph():
    """model.compile: the stream check must not read a value (a graph break per forward)."""
    from helpers.models import pack_row, random_docs, tiny_model

    model = tiny_model(dtype=torch.float32)
    batch = pack_row(random_docs([5, 4], seed=0), T=12)
    explained = torch._dynamo.explain(model)(
        batch["input_ids"], batch["segment_ids"], batch["position_ids"]
    )
    assert explained.graph_break_count == 0, explained.break_reasons
    assert masks.is_stream(torch.zeros(1, 3, dtype=torch.int32))  # eager CPU check unchanged


@pytest.mark.parametrize("attention", ["matmul", "sdpa"])
@pytest.mark.parametrize("packed", [True, False])
def test_one_mask_per_forward_shared_by_every_layer(monkeypatch, attention, packed):
    """The mask (and, for stream rows on the matmul path, its [T, T] causal bias) is built once
    per forward and the same object reaches every layer."""
    from helpers.models import pack_row, random_docs, tiny_model

    model = tiny_model(dtype=torch.float32, attention=attention, n_layer=3)
    batch = pack_row(random_docs([5, 4] if packed else [9], seed=0), T=12)
    seen, biases = [], []
    attend, causal_bias = masks.attend, masks.causal_bias
    monkeypatch.setattr(masks, "attend", lambda q, k, v, m: seen.append(m) or attend(q, k, v, m))
    monkeypatch.setattr(masks, "causal_bias", lambda *a: biases.append(1) or causal_bias(*a))
    segments = batch["segment_ids"] if packed else None
    model(batch["input_ids"], segments, batch["position_ids"])
    assert len(seen) == 3 and all(m is seen[0] for m in seen)
    assert seen[0].is_causal == (not packed and attention == "sdpa")
    assert len(biases) == (1 if attention == "matmul" and not packed else 0)
