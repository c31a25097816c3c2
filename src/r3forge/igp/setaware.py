"""Set-aware IGP (beyond the paper, its stated future work): greedy selection by *conditional* information
gain given the passages already selected, instead of every passage's IG against the bare question.

Round r probes, for every remaining candidate d, the generator with the selected set S and d together:
prompt B with document = the passages of S (selection order) then d, joined by a blank line. The gain of d is

    gain_r(d) = NU(q | S) - NU(q | S + [d])          NU(q | []) = NU(q)

and the best candidate joins S (ties: the earlier retriever index). Round 0 is plain IGP: the same probes
and the same IG as `probe_gains`. A question stops when its best gain is below T_p (T_p = -inf never stops),
when Top-M passages are selected, when its candidates run out, or when the best one would take the selected
tokens past B (the token guard, cut exactly as `select.truncate` cuts the selection order). Each round is
one batched `generate` call across all questions still selecting; NU(q) comes from the same cache as
`probe_gains` (question -> Uncertainty, per backend and `ProbeConfig`).

The deployment gates act as in `igp_select`: NU(q) < `gate_nu` -> the retriever's order ("skipped_certain",
and no conditional probe is spent); fewer than `min_pass` round-0 candidates with IG >= T_p -> the
retriever's order ("fallback_pass_rate"). Both go through the same truncation.

    sel = greedy_select(backend, ["Who wrote Hamlet?"], [["Hamlet is by Shakespeare.", "Paris is big."]],
                        ProbeConfig(k=20, max_steps=8), SelectConfig(top_m=2))
    sel[0].indices -> [0, 1];  sel[0].gains -> [0.31, 0.02];  sel[0].probes -> 3 (2 in round 0, 1 in round 1)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from r3forge.backends.base import GenerationBackend, GenerationRequest
from r3forge.igp.probe import ProbeConfig, QuestionGains, probe_gains, probe_request
from r3forge.igp.select import SelectConfig, truncate
from r3forge.igp.uncertainty import Uncertainty, information_gain

SEPARATOR = "\n\n"  # between the passages of a set in the probe's document


@dataclass(frozen=True)
class SetSelection:
    """One question's set-aware selection. `gains` and `nu` are aligned with `indices` (round r picked
    `indices[r]` with gain `gains[r]`, after which NU(q | S) = `nu[r]`); `round_gains[r]` holds every
    candidate probed in round r (retriever index -> gain), the rejected last round included; round 0 is
    plain IGP's IG."""

    indices: list[int]  # selected candidates (retriever indices), in selection order
    mode: str  # "igp", "fallback_pass_rate" or "skipped_certain"
    passed: int  # round-0 candidates with IG >= T_p (0 when skipped_certain: nothing was probed)
    nu_question: float  # NU(q)
    gains: list[float] = field(default_factory=list)  # [len(indices)] in "igp" mode, else []
    nu: list[float] = field(default_factory=list)  # [len(indices)] in "igp" mode, else []
    round_gains: list[dict[int, float]] = field(default_factory=list)  # [rounds] {candidate: gain}
    probes: int = 0  # conditional probes spent on this question (NU(q) not counted: cached, shared)


def set_document(passages: Sequence[str]) -> str:
    """The probe's document for a set: its passages in order, joined by a blank line.

    >>> set_document(["A is 1.", "B is 2."])
    'A is 1.\\n\\nB is 2.'
    """
    if not passages:
        raise ValueError("a set probe needs at least one passage (the empty set is the unconditional probe)")
    return SEPARATOR.join(passages)


def set_probe_request(question: str, passages: Sequence[str], config: ProbeConfig) -> GenerationRequest:
    """Prompt B conditioned on a set: `probe.CONDITIONAL` with the joined passages as the document; the
    one-passage set is exactly `probe_request(question, passage, config)`."""
    return probe_request(question, set_document(passages), config)


def argmax_gain(gains: Mapping[int, float]) -> int:
    """The candidate with the highest gain; ties go to the earlier retriever index.

    >>> argmax_gain({3: 0.2, 1: 0.5, 0: 0.1, 2: 0.5})
    1
    """
    if not gains:
        raise ValueError("no candidate to pick from")
    return min(gains, key=lambda i: (-gains[i], i))


@dataclass
class _Greedy:
    """The running state of one question."""

    question: str
    docs: Sequence[str]
    tokens: Sequence[int]
    nu_question: float
    chosen: list[int] = field(default_factory=list)
    gains: list[float] = field(default_factory=list)
    nu: list[float] = field(default_factory=list)
    rounds: list[dict[int, float]] = field(default_factory=list)
    mode: str = "igp"
    passed: int = 0
    probes: int = 0
    done: bool = False

    def remaining(self) -> list[int]:
        return [i for i in range(len(self.docs)) if i not in self.chosen]

    def documents(self) -> list[str]:
        """Round r's probe documents, one per remaining candidate: S then the candidate."""
        selected = [self.docs[i] for i in self.chosen]
        return [set_document([*selected, self.docs[i]]) for i in self.remaining()]

    def fall_back(self, mode: str, select: SelectConfig) -> None:
        retriever = list(range(len(self.docs)))
        self.chosen = truncate(retriever, self.tokens, select.top_m, select.token_budget)
        self.mode, self.gains, self.nu, self.done = mode, [], [], True

    def advance(self, conditional: Sequence[Uncertainty], select: SelectConfig) -> None:
        """Take one round's NU(q | S + [d]) for the remaining candidates (in order) and pick, or stop."""
        current = self.nu[-1] if self.nu else self.nu_question
        remaining = self.remaining()
        gains = {i: information_gain(current, u.nu) for i, u in zip(remaining, conditional, strict=True)}
        self.rounds.append(gains)
        self.probes += len(remaining)
        if len(self.rounds) == 1:
            self.passed = sum(g >= select.threshold for g in gains.values())
            if self.passed < select.min_pass:
                self.fall_back("fallback_pass_rate", select)
                return
        best = argmax_gain(gains)
        spent = sum(self.tokens[i] for i in self.chosen)
        over = select.token_budget is not None and spent + self.tokens[best] > select.token_budget
        if gains[best] < select.threshold or over:
            self.done = True
            return
        self.chosen.append(best)
        self.gains.append(gains[best])
        self.nu.append(conditional[remaining.index(best)].nu)
        self.done = len(self.chosen) >= select.top_m or len(self.chosen) == len(self.docs)

    def result(self) -> SetSelection:
        return SetSelection(
            list(self.chosen),
            self.mode,
            self.passed,
            self.nu_question,
            list(self.gains),
            list(self.nu),
            list(self.rounds),
            self.probes,
        )


def greedy_select(
    backend: GenerationBackend,
    questions: Sequence[str],
    candidates: Sequence[Sequence[str]],
    probe: ProbeConfig,
    select: SelectConfig,
    cache: dict[str, Uncertainty] | None = None,
    tokens: Sequence[Sequence[int]] | None = None,
) -> list[SetSelection]:
    """Greedy set-aware selection for all questions at once: NU(q) from `cache` (else one batched call),
    then one batched call per round across the questions still selecting.

    `tokens[q][i]` is candidate i's token count, needed only with `select.token_budget` (B).
    """
    if len(questions) != len(candidates):
        raise ValueError(f"{len(questions)} questions but {len(candidates)} candidate lists")
    if tokens is None:
        if select.token_budget is not None:
            raise ValueError("select.token_budget (B) needs the candidates' token counts: pass tokens=")
        tokens = [[0] * len(docs) for docs in candidates]
    if [len(t) for t in tokens] != [len(docs) for docs in candidates]:
        raise ValueError("tokens must hold one count per candidate of every question")
    cache = {} if cache is None else cache
    probe_gains(backend, questions, [[] for _ in questions], probe, cache)  # NU(q): one call for the missing
    states = [
        _Greedy(q, docs, counts, cache[q].nu, done=not docs)
        for q, docs, counts in zip(questions, candidates, tokens, strict=True)
    ]
    for state in states:
        if select.gate_nu is not None and state.nu_question < select.gate_nu:
            state.fall_back("skipped_certain", select)
        elif not state.docs and select.min_pass > 0:  # nothing to probe: nothing passes
            state.fall_back("fallback_pass_rate", select)
    while active := [s for s in states if not s.done]:
        rounds: list[QuestionGains] = probe_gains(
            backend, [s.question for s in active], [s.documents() for s in active], probe, cache
        )
        for state, gains in zip(active, rounds, strict=True):
            state.advance(gains.conditional, select)
    return [s.result() for s in states]
