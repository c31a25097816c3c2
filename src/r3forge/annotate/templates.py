"""Versioned prompt templates of the annotation steps (files under `prompts/`, or a user's own file).

A built-in template's version is its file name (`verbal_annotation_v1`); a user's template is versioned
`custom-<sha256 of its text, 12 hex>`, so editing it changes every cache key and nothing is silently reused.
Placeholders are `{name}` and filled by plain replacement: other braces in a template stay as they are.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from pathlib import Path

from r3forge.errors import ConfigError

PROMPTS = Path(__file__).resolve().parent / "prompts"


def load_template(path: str | None, builtin: str, required: Sequence[str]) -> tuple[str, str]:
    """(template text, prompt version) of `path`, or of the built-in `prompts/<builtin>.txt` when empty.

    Raises `ConfigError` naming the file when it cannot be read or lacks a `required` placeholder.
    """
    default = PROMPTS / f"{builtin}.txt"
    source = Path(path) if path else default
    try:
        text = source.read_text(encoding="utf-8")
    except OSError as e:
        raise ConfigError(f"{source}: cannot read the prompt template ({e.strerror or e})") from e
    missing = [f"{{{name}}}" for name in required if f"{{{name}}}" not in text]
    if missing:
        raise ConfigError(f"{source}: prompt template lacks placeholder(s) {missing} (see {default})")
    if not path:
        return text, builtin
    return text, f"custom-{hashlib.sha256(text.encode('utf-8')).hexdigest()[:12]}"


def fill(template: str, values: Mapping[str, object]) -> str:
    """Replace each `{name}` of `values` in `template` (stripped).

    >>> fill("Q: {question} {json: {x}}", {"question": "why?"})
    'Q: why? {json: {x}}'
    """
    pattern = "|".join(re.escape(f"{{{name}}}") for name in values)
    return re.sub(pattern, lambda m: str(values[m[0][1:-1]]), template).strip()
