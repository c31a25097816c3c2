"""QREAM's dual-criteria rejection sampling: score each rewrite candidate, pick the golden rewrite.

    golden, reason = select_golden(candidates, mode="dual")

For question q with gold answers A, each candidate c (a rewrite of the raw retrieval r_raw from round n) has
- the hard filter `passes`: some gold answer is contained in the fixed reader's answer from c (whole-token
  inclusion after SQuAD normalization: case, punctuation and articles do not matter; "Obama" is not in
  "Obamacare"); with the optional echo guard, a gold answer the question itself names must be matched exactly;
- S_perf = token F1(reader answer, A) (max over golds);
- S_fact = supported atomic facts of c / all its facts (judged against r_raw; 1 - r_inc);
- S_total = (S_perf + S_fact) / 2.

`mode` gives the paper's Table 4 ablations:
- "dual": among candidates passing the filter, the argmax of S_total (the paper's method);
- "utility": among candidates passing the filter, the argmax of S_perf;
- "fidelity": among all candidates, the argmax of S_fact (no filter);
- "none": no rejection sampling: the last round's candidate.
Ties go to the earlier round (fewer rewrites away from r_raw), then to the lower candidate index. A question
with no eligible candidate is dropped (`golden` None) with a reason.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from r3forge.metrics.qa import answer_in_text, exact_match, f1_score

Mode = Literal["dual", "utility", "fidelity", "none"]
MODES: tuple[str, ...] = ("dual", "utility", "fidelity", "none")


def hard_filter(reader_answer: str, golds: Sequence[str], question: str = "") -> bool:
    """Whether a gold answer is contained in the reader's answer (normalized, whole tokens).

    >>> hard_filter("It was Barack Obama, in 2009.", ["barack obama"])
    True
    >>> hard_filter("Obamacare", ["Obama"]), hard_filter("", ["Obama"])
    (False, False)

    With `question` (the echo guard, off in the paper), a gold answer that the question itself contains must
    match the reader's answer exactly: a comparison question names both options, and containment would pass
    a reader that echoes them ("A was older than B" for gold B).

    >>> q, echo = "Who was older, George Atzerodt or Andrew Johnson?", "George Atzerodt was older than Andrew Johnson"
    >>> hard_filter(echo, ["Andrew Johnson"]), hard_filter(echo, ["Andrew Johnson"], q)
    (True, False)
    >>> hard_filter("Andrew Johnson.", ["Andrew Johnson"], q)
    True
    """
    golds = [g for g in golds if g and g.strip()]
    echoed = [g for g in golds if question and answer_in_text([g], question)]
    free = [g for g in golds if g not in echoed]
    return bool(free and answer_in_text(free, reader_answer)) or bool(
        echoed and exact_match(reader_answer, echoed) == 1.0
    )


def s_perf(reader_answer: str, golds: Sequence[str]) -> float:
    """Token F1 of the reader's answer against the gold answers (max over golds).

    >>> round(s_perf("Barack Obama", ["Obama"]), 3)
    0.667
    """
    return f1_score(reader_answer, list(golds))


def s_fact(supported: Sequence[bool]) -> float:
    """Share of a candidate's atomic facts supported by r_raw (0.0 for a candidate without facts: nothing
    it says can be checked, so it earns no fidelity).

    >>> s_fact([True, True, False, True])
    0.75
    """
    return sum(map(bool, supported)) / len(supported) if supported else 0.0


@dataclass(frozen=True)
class RewriteCandidate:
    """One scored rewrite candidate of one question."""

    index: int  # position among the question's candidates
    round: int  # 1 = rewrite of r_raw; n > 1 = rewrite of round n-1's first l tokens
    text: str
    passes: bool  # the hard filter
    s_perf: float
    s_fact: float

    @property
    def s_total(self) -> float:
        return (self.s_perf + self.s_fact) / 2


def select_golden(
    candidates: Sequence[RewriteCandidate], mode: Mode = "dual"
) -> tuple[RewriteCandidate | None, str]:
    """(golden candidate, "") or (None, why the question is dropped).

    >>> a = RewriteCandidate(0, 1, "a", True, 0.5, 0.5)
    >>> b = RewriteCandidate(1, 2, "b", True, 1.0, 0.0)   # same S_total as a: the earlier round wins
    >>> c = RewriteCandidate(2, 3, "c", False, 1.0, 1.0)  # best scores, but fails the hard filter
    >>> select_golden([a, b, c])[0].text, select_golden([a, b, c], "utility")[0].text
    ('a', 'b')
    >>> select_golden([c])
    (None, 'no_candidate_passes_filter')
    """
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    if not candidates:
        return None, "no_candidates"
    if mode == "none":
        return max(candidates, key=lambda c: (c.round, -c.index)), ""
    pool = list(candidates) if mode == "fidelity" else [c for c in candidates if c.passes]
    if not pool:
        return None, "no_candidate_passes_filter"
    score = {"dual": lambda c: c.s_total, "utility": lambda c: c.s_perf, "fidelity": lambda c: c.s_fact}[mode]
    return max(pool, key=lambda c: (score(c), -c.round, -c.index)), ""
