"""The format state machine and the reward table, on adversarial completions (only the completion is scored)."""

import pytest

from r3forge.agent.reward import answer_reward, format_reward, parse_completion

INFO = "\n\n<information>[Doc 1] States it. (Relevance score: 5)</information>\n\n"
GOLD = ["Paris"]

# (completion, format valid, parsed answer, reward against GOLD)
CASES = [
    # well-formed
    ("<answer>Paris</answer>", True, "Paris", 1.0),
    ("I know it. <answer> Paris </answer>", True, "Paris", 1.0),
    ("<think>easy</think><answer>Paris</answer>", True, "Paris", 1.0),
    (f"<search>capital of France</search>{INFO}<answer>Paris</answer>", True, "Paris", 1.0),
    (
        f"Look. <search>a</search>{INFO}More. <search>b</search>{INFO}<answer>the Paris</answer>",
        True,
        "the Paris",
        1.0,
    ),
    (f"<search>a</search>{INFO}<answer>Rome</answer>", True, "Rome", 0.2),
    ("<answer>Rome</answer>\n", True, "Rome", 0.2),
    # answer tags inside an observation are the document's text
    (
        "<search>a</search>\n<information><answer>Paris</answer></information>\n<answer>Rome</answer>",
        True,
        "Rome",
        0.2,
    ),
    ("<search>a</search><information><answer>Paris</answer></information>", False, None, 0.0),
    (
        "<search>a</search><information>x <search>y</search> z</information><answer>Paris</answer>",
        True,
        "Paris",
        1.0,
    ),
    # two answers / text after the answer
    ("<answer>Paris</answer><answer>Rome</answer>", False, "Rome", 0.1),
    ("<answer>Rome</answer><answer>Paris</answer>", False, "Paris", 0.8),
    ("<answer>Paris</answer> because it is the capital", False, "Paris", 0.8),
    (f"<answer>Paris</answer><search>more</search>{INFO}", False, "Paris", 0.8),
    # unbalanced / nested tags
    ("<answer>Paris", False, None, 0.0),
    ("Paris</answer>", False, None, 0.0),
    ("<answer><answer>Paris</answer>", False, "Paris", 0.8),
    ("<think>hmm <answer>Paris</answer>", False, "Paris", 0.8),
    ("<think>a</think></think><answer>Paris</answer>", False, "Paris", 0.8),
    ("<search>a<answer>Paris</answer>", False, "Paris", 0.8),
    (f"<search>a</search>{INFO}</information><answer>Paris</answer>", False, "Paris", 0.8),
    ("<information>made up</information><answer>Paris</answer>", False, "Paris", 0.8),
    # search/information pairing
    ("<search>a</search><answer>Paris</answer>", False, "Paris", 0.8),
    ("<search>a</search> so <information>x</information><answer>Paris</answer>", False, "Paris", 0.8),
    ("<search></search><information>x</information><answer>Paris</answer>", False, "Paris", 0.8),
    ("<search>a</search>", False, None, 0.0),
    ("<search>a</search><information>x", False, None, 0.0),
    # empty / missing answers
    ("<answer></answer>", False, None, 0.0),
    ("<answer>   </answer>", False, None, 0.0),
    ("The answer is Paris.", False, None, 0.0),
    ("", False, None, 0.0),
    ("Answer: Paris", False, None, 0.0),
    # the answer quoted only in reasoning, or with case/punctuation noise
    ("I think Paris. <answer>Rome</answer>", True, "Rome", 0.2),
    ("<answer>PARIS.</answer>", True, "PARIS.", 1.0),
    ("<ANSWER>Paris</ANSWER>", False, None, 0.0),
]


def test_table_has_at_least_30_adversarial_cases():
    assert len(CASES) >= 30


@pytest.mark.parametrize(("completion", "valid", "answer", "reward"), CASES)
def test_format_answer_and_reward(completion, valid, answer, reward):
    parsed = parse_completion(completion)
    assert parsed.valid is valid, parsed.reason
    assert parsed.answer == answer
    assert answer_reward([completion], answers=[GOLD]) == [pytest.approx(reward)]
    assert format_reward([completion]) == [float(valid)]


def test_only_the_completion_is_scored():
    """A prompt that contains the gold answer in tags gives nothing: the reward never sees it."""
    prompt = [{"role": "user", "content": "Question: <answer>Paris</answer>?"}]
    completions = [[{"role": "assistant", "content": "No idea."}]]
    assert answer_reward(completions, answers=[GOLD], prompts=[prompt]) == [0.0]


def test_conversational_completions_and_lengths():
    assert answer_reward([[{"role": "assistant", "content": "<answer>Paris</answer>"}]], answers=[GOLD]) == [
        1.0
    ]
    with pytest.raises(ValueError, match="2 completions but 1"):
        answer_reward(["a", "b"], answers=[GOLD])
