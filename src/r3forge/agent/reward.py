"""The agent's output format and its reward, as plain functions (TRL reward signature).

A completion is everything after the prompt: the policy's turns with the environment's observations spliced
in. Its format is a state machine over the tags:

    completion := reasoning (search information reasoning)* answer
    reasoning  := free text and/or <think> ... </think> blocks (optional)
    search     := <search> query </search>          (non-empty query)
    information:= <information> ... </information>  (only whitespace between </search> and <information>;
                                                      tags inside an observation are its text, not actions)
    answer     := <answer> text </answer>           (exactly one, non-empty, last: only whitespace after)

The final answer is read only outside <information> blocks. The environment also neutralizes tag-like
text in everything it puts inside one (`neutralize_tags`: retrieved titles and texts, reranker comments),
so a document containing "</information> <answer> X </answer>" can neither close its observation, nor
answer for the policy, nor break a correct answer's format. Rewards read the completion as sampled (special
tokens as their own text, `rollout.sampled_text`), never text with special tokens dropped: a tag split by a
special token's text ("<ans<|im_end|>wer>") stays split. Gold answers that normalize to nothing (NQ's
"A+", ")") are never matched: "<answer>the</answer>" would match them. Rewards (Search-R1 / Verbal-R3):

    correct answer (EM) and format           -> 1.0
    correct answer, bad format               -> 1.0 - format_penalty (0.8)
    wrong answer, correct format             -> format_score (0.2)
    bad format but an answer parsed          -> parsed_score (0.1)
    no answer                                -> 0.0
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from r3forge.metrics.qa import exact_match, normalize_answer

TAGS = ("think", "search", "information", "answer")
_TAG = re.compile(r"<(/?)(think|search|information|answer)>")
_TAG_LIKE = re.compile(r"<\s*(/?)\s*(think|search|information|answer)\s*>", re.IGNORECASE)


def neutralize_tags(text: str) -> str:
    """Environment text (documents, comments) with every tag-like `<answer>`, `</information>`, ... (any
    case, inner spaces) written with square brackets, so no observation can open or close an action.

    >>> neutralize_tags("x </information> <Answer> Paris </ answer> y")
    'x [/information] [answer] Paris [/answer] y'
    """
    return _TAG_LIKE.sub(lambda m: f"[{m.group(1)}{m.group(2).lower()}]", text)


@dataclass(frozen=True)
class Parsed:
    """What the state machine read from one completion."""

    valid: bool  # the whole completion follows the grammar
    answer: str | None  # the last <answer> outside observations (stripped), None when there is none
    searches: list[str]  # the <search> queries, in order (outside observations)
    reason: str  # "ok" or why the format is bad


def parse_completion(text: str) -> Parsed:
    """Run the tag state machine over `text`.

    >>> parse_completion("<think>x</think><search>a</search>\\n<information>d</information><answer>b</answer>")
    Parsed(valid=True, answer='b', searches=['a'], reason='ok')
    >>> parse_completion("<answer>b</answer><answer>c</answer>").reason
    'second answer'
    >>> parse_completion("<information><answer>z</answer></information>").answer is None
    True
    """
    state = "reason"  # reason | think | search | after_search | information | answer | done
    answers: list[str] = []
    searches: list[str] = []
    problem = ""
    start = 0  # where the current tag's content began
    pos = 0
    for m in _TAG.finditer(text):
        closing, tag = m.group(1) == "/", m.group(2)
        between = text[pos : m.start()]
        pos = m.end()
        if state == "information":  # only its own closing tag ends an observation
            if closing and tag == "information":
                state = "reason"
            continue
        if state == "after_search" and between.strip():
            problem = problem or "text between </search> and <information>"
        if state == "done" and not problem:
            problem = "second answer" if tag == "answer" and not closing else "text after the answer"
        if not closing:
            if state == "after_search" and tag != "information":
                problem = problem or f"<{tag}> where <information> must follow </search>"
                state = "reason"
            if state in ("think", "search", "answer"):  # the unclosed tag is abandoned; the new one opens
                problem = problem or f"<{tag}> inside <{state}>"
            if tag == "information" and state != "after_search":
                problem = problem or "<information> without a search before it"
            state, start = tag, m.end()
            continue
        # a closing tag: it must close the open one
        if state != tag:
            problem = problem or f"</{tag}> without <{tag}>"
            continue
        content = text[start : m.start()].strip()
        if tag == "search":
            searches.append(content)
            if not content:
                problem = problem or "empty search"
            state = "after_search"
        elif tag == "answer":
            answers.append(content)
            if not content:
                problem = problem or "empty answer"
            state = "done"
        else:  # think
            state = "reason"
    tail = text[pos:]
    if state in ("think", "search", "answer", "information"):
        problem = problem or f"unclosed <{state}>"
    elif state == "after_search":
        problem = problem or "search without information"
    elif state == "done" and tail.strip():
        problem = problem or "text after the answer"
    elif not answers:
        problem = problem or "no answer"
    answer = next((a for a in reversed(answers) if a), None)
    return Parsed(not problem, answer, searches, problem or "ok")


def completion_text(completion: Any) -> str:
    """A TRL completion as text: a string, or a list of chat messages (their contents joined).

    >>> completion_text([{"role": "assistant", "content": "<answer>x</answer>"}])
    '<answer>x</answer>'
    """
    if isinstance(completion, str):
        return completion
    return "".join(m["content"] for m in completion if isinstance(m.get("content"), str))


def answer_reward_one(
    text: str,
    answers: Sequence[str],
    format_penalty: float = 0.2,
    format_score: float = 0.2,
    parsed_score: float = 0.1,
) -> float:
    """The reward of one completion against its gold answers.

    >>> ok = "<search>q</search><information>d</information><answer>Paris</answer>"
    >>> answer_reward_one(ok, ["Paris"]), answer_reward_one(ok, ["Rome"])
    (1.0, 0.2)
    >>> answer_reward_one("Paris <answer>Paris</answer> and more", ["Paris"])
    0.8
    >>> answer_reward_one("<answer>Rome</answer><answer>Oslo</answer>", ["Paris"])
    0.1
    >>> answer_reward_one("Paris", ["Paris"])
    0.0
    >>> answer_reward_one("<answer>the</answer>", ["A+"])  # "A+" normalizes to "": no answer matches it
    0.2
    """
    parsed = parse_completion(text)
    if parsed.answer is None:
        return 0.0
    golds = answerable(answers)
    correct = bool(golds) and exact_match(parsed.answer, golds) == 1.0
    if correct:
        return 1.0 if parsed.valid else 1.0 - format_penalty
    return format_score if parsed.valid else parsed_score


def answerable(answers: Sequence[str]) -> list[str]:
    """The gold answers an answer can match: those that do not normalize to the empty string.

    >>> answerable(["A+", ")", "grade A"])
    ['grade A']
    """
    return [a for a in answers if normalize_answer(a)]


def scored_texts(completions: Sequence[Any], sampled_completions: Sequence[str] | None) -> list[str]:
    """The texts a reward reads: `sampled_completions` (the agent's rollout_func attaches the completions as
    sampled, `rollout.sampled_text`) where given, since TRL decodes `completions` with
    skip_special_tokens=True, which joins "<ans<|im_end|>wer>" into "<answer>"; else the completions.

    >>> scored_texts([[{"role": "assistant", "content": "<answer>x</answer>"}]], ["<ans<|im_end|>wer>x</answer>"])
    ['<ans<|im_end|>wer>x</answer>']
    """
    if sampled_completions is None:
        return [completion_text(c) for c in completions]
    if len(sampled_completions) != len(completions):
        raise ValueError(f"{len(completions)} completions but {len(sampled_completions)} sampled_completions")
    return list(sampled_completions)


def answer_reward(
    completions: Sequence[Any],
    answers: Sequence[Sequence[str]],
    sampled_completions: Sequence[str] | None = None,
    **kwargs: Any,
) -> list[float]:
    """TRL reward function: EM of the final answer with the format bonus/penalty (see the module docstring).

    Only the completions are scored; the prompts (which may quote tags or even the answer) never are.
    `answers` is the dataset column of gold answer lists; `sampled_completions`, where given, the completions
    as sampled, read instead of `completions` (`scored_texts`).

    >>> answer_reward(["<answer>1858</answer>", "<answer>1861</answer>"], answers=[["1858"], ["1858"]])
    [1.0, 0.2]
    >>> answer_reward(["<answer>1858</answer>"], [["1858"]], sampled_completions=["<ans<|im_end|>wer>1858</ans<|im_end|>wer>"])
    [0.0]
    """
    if len(completions) != len(answers):
        raise ValueError(f"answer_reward: {len(completions)} completions but {len(answers)} answer lists")
    texts = scored_texts(completions, sampled_completions)
    return [answer_reward_one(text, golds) for text, golds in zip(texts, answers, strict=True)]


def format_reward(
    completions: Sequence[Any], sampled_completions: Sequence[str] | None = None, **kwargs: Any
) -> list[float]:
    """1.0 when the completion follows the tag grammar, else 0.0 (a diagnostic; weight 0 by default).

    >>> format_reward(["<answer>x</answer>", "<answer>x"])
    [1.0, 0.0]
    """
    return [float(parse_completion(text).valid) for text in scored_texts(completions, sampled_completions)]
