"""Typed dataclass configs: YAML gives defaults, CLI flags override, unknown keys are errors.

The conventions follow TRL's `TrlParser` (a `--config file.yaml` flag on top of `HfArgumentParser`), made
strict: an unknown YAML key or CLI flag is an error that names the file:line (or the flag) and the closest
valid key, and a YAML value that does not convert to the field's type names the file:line and the key.

    @dataclass
    class TrainConfig:
        learning_rate: float = field(default=1e-5, metadata={"help": "Peak learning rate."})

    (cfg,) = parse_config((TrainConfig,), ["--config", "x.yaml", "--learning_rate", "2e-5"])

Any dataclass works, including TRL's (`SFTConfig`, `GRPOConfig`), since the field machinery is
`transformers.HfArgumentParser`'s.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import enum
import inspect
import json
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml
from transformers import HfArgumentParser

from r3forge.errors import ConfigError


def _closest(key: str, valid: Sequence[str]) -> str:
    match = difflib.get_close_matches(key, list(valid), n=1, cutoff=0.6)
    return f" (did you mean '{match[0]}'?)" if match else ""


def load_yaml_with_lines(path: str | Path) -> tuple[dict[str, Any], dict[str, int]]:
    """Load a flat YAML mapping and the 1-based line of each top-level key.

    Raises `ConfigError` naming the file (and line) for a missing file, bad YAML, a non-mapping document
    or a duplicated key.
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise ConfigError(f"{path}: cannot read config file ({e.strerror or e})") from e
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark is not None else str(path)
        raise ConfigError(f"{where}: invalid YAML: {getattr(e, 'problem', None) or e}") from e
    if data is None:
        return {}, {}
    if not isinstance(data, dict) or not isinstance(node, yaml.MappingNode):
        raise ConfigError(
            f"{path}:1: a config file must be a mapping of key: value, got {type(data).__name__}"
        )
    lines: dict[str, int] = {}
    for key_node, _ in node.value:
        key = str(key_node.value)
        if key in lines:
            raise ConfigError(
                f"{path}:{key_node.start_mark.line + 1}: duplicate key '{key}' (first at line {lines[key]})"
            )
        lines[key] = key_node.start_mark.line + 1
    return {str(k): v for k, v in data.items()}, lines


def _convert(action: argparse.Action, value: Any, where: str, listable: bool = False) -> Any:
    """Convert one YAML value with the argparse action's own type function (as the CLI would). `listable`:
    the field's type admits a list although its flag takes one value (TrainingArguments' `report_to: str |
    list[str]`, which the resolved config of a run holds as a list): a YAML list is converted item by item."""
    if value is None or isinstance(value, dict) or action.type is None:
        return value
    convert = action.type

    def one(v: Any) -> Any:
        if isinstance(v, (list, dict)):
            raise ConfigError(f"{where}: expected a single value, got {type(v).__name__} {v!r}")
        try:
            out = convert(v if isinstance(v, str) else str(v))
        except (TypeError, ValueError, argparse.ArgumentTypeError) as e:
            raise ConfigError(f"{where}: invalid value {v!r} ({e})") from e
        if action.choices is not None and out not in action.choices:
            shown = [c.value if isinstance(c, enum.Enum) else c for c in action.choices]
            raise ConfigError(f"{where}: invalid value {v!r}; choose from {shown}")
        return out

    if action.nargs in ("+", "*") or isinstance(action.nargs, int) or (listable and isinstance(value, list)):
        if not isinstance(value, list):
            value = [value]
        return [one(v) for v in value]
    return one(value)


def _dest_actions(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    """Each field's first action: the one with the type. A bool field whose default is True also has a
    `--no_<name>` store_false action on the same dest; argparse takes the default of the first action."""
    actions: dict[str, argparse.Action] = {}
    for a in parser._actions:
        if a.dest not in ("help", "config"):
            actions.setdefault(a.dest, a)
    return actions


def _list_fields(dataclass_types: Sequence[type]) -> set[str]:
    """Names of fields whose annotation admits a list (`list[str] | str`, `Union[list, str, None]`), read from
    the classes' annotations: HfArgumentParser rewrites `Field.type` in place (to `str` for report_to)."""
    names = set()
    for t in dataclass_types:
        for klass in t.__mro__:
            for name, hint in inspect.get_annotations(klass).items():
                if re.search(r"\b(list|List)\b", str(hint)):
                    names.add(name)
    return names


def _set_default(parser: argparse.ArgumentParser, dest: str, value: Any) -> None:
    """A new default for every action of `dest` (both `--x` and `--no_x` of a True-default bool)."""
    for a in parser._actions:
        if a.dest == dest:
            a.default = value


def parse_config(
    dataclass_types: Sequence[type],
    argv: Sequence[str] | None = None,
    prog: str | None = None,
    defaults: dict[str, Any] | None = None,
) -> tuple[Any, ...]:
    """Parse `--config file.yaml` plus CLI flags into one instance of each dataclass type.

    Precedence: dataclass defaults < `defaults` (a recipe's own, e.g. paper settings over TRL's) < YAML
    values < CLI flags. Fields of all dataclasses share one namespace (as in TRL). Unknown YAML keys and
    unknown flags raise `ConfigError`.
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = HfArgumentParser(tuple(dataclass_types), prog=prog, allow_abbrev=False)
    parser.add_argument("--config", type=str, default=None, help="YAML file with defaults for any field.")
    actions = _dest_actions(parser)
    listable = _list_fields(dataclass_types)
    for key, value in (defaults or {}).items():
        if key not in actions:
            raise ConfigError(f"{prog or 'parse_config'}: default for unknown field '{key}'")
        _set_default(parser, key, value)
    config_path = _config_flag(argv)
    if config_path is not None:
        data, lines = load_yaml_with_lines(config_path)
        for key, value in data.items():
            where = f"{config_path}:{lines.get(key, 1)}: key '{key}'"
            if key not in actions:
                raise ConfigError(
                    f"{config_path}:{lines.get(key, 1)}: unknown key '{key}'{_closest(key, actions)}"
                )
            action = actions[key]
            _set_default(parser, key, _convert(action, value, where, key in listable))
            action.required = False
    flags = {s for a in parser._actions for s in a.option_strings}
    for token in argv:
        flag = token.split("=", 1)[0]
        if flag.startswith("--") and flag not in flags:
            raise ConfigError(f"unknown flag '{flag}'{_closest(flag, sorted(flags))}")
    try:
        outputs = parser.parse_args_into_dataclasses(args=argv, return_remaining_strings=True)
    except ValueError as e:  # a config class's own validation (__post_init__), e.g. TrainingArguments'
        hint = " (on a machine without a GPU set bf16: false)" if "bf16" in str(e) else ""
        raise ConfigError(f"{config_path or 'command-line flags'}: invalid settings: {e}{hint}") from e
    *configs, remaining = outputs
    # HfArgumentParser appends a Namespace with the non-dataclass arguments (here only --config)
    configs = [c for c in configs if not isinstance(c, argparse.Namespace)]
    if remaining:
        raise ConfigError(f"unrecognized arguments: {' '.join(remaining)}")
    return tuple(configs)


def _config_flag(argv: Sequence[str]) -> str | None:
    for i, token in enumerate(argv):
        if token == "--config":
            if i + 1 >= len(argv):
                raise ConfigError("--config needs a path to a YAML file")
            return argv[i + 1]
        if token.startswith("--config="):
            return token.split("=", 1)[1]
    return None


def config_to_dict(config: Any) -> dict[str, Any]:
    """A dataclass config as a plain, YAML/JSON-serializable dict (enums by value, paths as str)."""

    def plain(v: Any) -> Any:
        if isinstance(v, enum.Enum):
            return v.value
        if isinstance(v, Path):
            return str(v)
        if isinstance(v, (list, tuple)):
            return [plain(x) for x in v]
        if isinstance(v, dict):
            return {str(k): plain(x) for k, x in v.items()}
        # a dataclass instance, e.g. TrainingArguments' AcceleratorConfig: as a mapping --config reads back
        if dataclasses.is_dataclass(v) and not isinstance(v, type):
            return plain(dataclasses.asdict(v))
        if isinstance(v, (str, int, float, bool)) or v is None:
            return v
        return json.loads(json.dumps(v, default=str))

    return {f.name: plain(getattr(config, f.name)) for f in dataclasses.fields(config) if f.init}


def save_config(configs: Sequence[Any], path: str | Path) -> Path:
    """Write the resolved config(s) as one YAML mapping that `--config` can read back."""
    merged: dict[str, Any] = {}
    for c in configs:
        merged.update(config_to_dict(c))
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(merged, sort_keys=False, allow_unicode=True), encoding="utf-8")
    return path


def missing_help(dataclass_type: type) -> list[str]:
    """Names of fields that lack `metadata={"help": ...}` (every config field must have help text)."""
    return [f.name for f in dataclasses.fields(dataclass_type) if f.init and not f.metadata.get("help")]
