"""IGP selection: IG reranking with stable ties, admission at T_p, Top-M and the token guard, and the two
gates that fall back to the retriever's order."""

from __future__ import annotations

import math

import pytest

from r3forge.igp.select import SelectConfig, ig_stats, igp_select, rerank_by_ig, truncate

IG = [0.05, 0.30, -0.10, 0.30, 0.00]
TOKENS = [100, 100, 100, 100, 100]


def test_pure_reranking_is_the_minus_inf_threshold() -> None:
    sel = igp_select(IG, 0.5, TOKENS, SelectConfig(top_m=5))
    assert sel.indices == [1, 3, 0, 4, 2] and sel.passed == 5 and sel.mode == "igp"
    assert rerank_by_ig([0.0, 0.0, 0.0]) == [0, 1, 2]  # all tied: the retriever's order


def test_threshold_admission_and_top_m() -> None:
    assert igp_select(IG, 0.5, TOKENS, SelectConfig(threshold=0.0, top_m=5)).indices == [1, 3, 0, 4]
    assert igp_select(IG, 0.5, TOKENS, SelectConfig(threshold=0.1, top_m=5)).indices == [1, 3]
    assert igp_select(IG, 0.5, TOKENS, SelectConfig(threshold=0.0, top_m=1)).indices == [1]
    assert igp_select(IG, 0.5, TOKENS, SelectConfig(threshold=1.0, top_m=3)).indices == []  # no gate: none


def test_token_guard() -> None:
    tokens = [100, 250, 50, 60, 40]
    sel = igp_select(IG, 0.5, tokens, SelectConfig(top_m=5, token_budget=320))
    assert sel.indices == [1, 3]  # 250 + 60 = 310; adding 100 would pass 320
    assert truncate([0, 1], [10, 10], top_m=5, token_budget=None) == [0, 1]


def test_gates_fall_back_to_the_retriever_order() -> None:
    gated = SelectConfig(threshold=0.2, top_m=3, min_pass=3)
    assert igp_select(IG, 0.5, TOKENS, gated).mode == "fallback_pass_rate"  # only 2 pass
    assert igp_select(IG, 0.5, TOKENS, gated).indices == [0, 1, 2]
    certain = SelectConfig(threshold=0.0, top_m=2, gate_nu=0.3)
    assert igp_select(IG, 0.1, TOKENS, certain).indices == [0, 1]
    assert igp_select(IG, 0.1, TOKENS, certain).mode == "skipped_certain"
    assert igp_select(IG, 0.4, TOKENS, certain).mode == "igp"


def test_stats_and_validation() -> None:
    stats = ig_stats(IG, 0.0)
    assert stats["count"] == 5 and stats["pass_rate"] == 0.8 and stats["q50"] == 0.05
    assert ig_stats([], 0.0) == {"count": 0}
    assert ig_stats(IG, -math.inf)["pass_rate"] == 1.0
    with pytest.raises(ValueError, match="top_m"):
        SelectConfig(top_m=0)
    with pytest.raises(ValueError, match="token counts"):
        igp_select([0.1], 0.5, [1, 2], SelectConfig())
