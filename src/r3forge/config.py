"""Typed dataclass configs: YAML gives defaults, CLI flags override, unknown keys are errors.

The conventions follow TRL's `TrlParser` (a `--config file.yaml` flag on top of `HfArgumentParser`), made
strict: an unknown YAML key or CLI flag is an error that names the file:line (or the flag) and the closest
valid key, and a YAML value that does not convert to the field's type names the file:line and the key.
Ranges are checked before any config object is built: a field's `metadata={"min": ..., "max": ...}`, or else
its name's entry in `BOUNDS` (one meaning per name in every command, TRL's fields included); a value out of
range names the file:line and key, or the flag. `where(config, name)` says where a parsed value came from,
for checks made later (a model argument that names no model: `r3forge.models.locate`).

    @dataclass
    class TrainConfig:
        learning_rate: float = field(default=1e-5, metadata={"help": "Peak learning rate."})

    (cfg,) = parse_config((TrainConfig,), ["--config", "x.yaml", "--learning_rate", "2e-5"])

Any dataclass works, including TRL's (`SFTConfig`, `GRPOConfig`), since the field machinery is
`transformers.HfArgumentParser`'s.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import difflib
import enum
import importlib
import inspect
import json
import math
import re
import sys
import types
import weakref
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml
from transformers import HfArgumentParser

from r3forge.errors import ConfigError

_COUNT, _FRACTION, _NON_NEGATIVE = (1, None), (0, 1), (0, None)
# Bounds by field name, inclusive (None: open), in every config class, ours and TRL's / transformers'. An
# optional field (`int | None`) left unset (null) is not checked: unset `max_questions` means every question,
# and a given one is >= 1 in every command. Only values from a YAML file or a flag are checked.
_COUNTS = (
    "batch_size concurrency max_concurrency max_questions max_items max_train_samples max_eval_samples "
    "max_train_questions max_docs_per_question max_per_score top_n top_m num_candidates max_tokens "
    "max_new_tokens rewrite_max_tokens answer_max_tokens reranker_max_tokens task_eval_max_new_tokens "
    "task_eval_batch_size policy_batch_size probe_k probe_max_steps num_seeds seed_words rounds prefix_tokens "
    "max_facts claims_per_kind samples iterations num_retrieve num_shown max_turns max_turn_tokens "
    "max_obs_tokens max_completion_tokens token_budget passage_max_words max_comment_words copy_max_run "
    "num_passages num_questions passages_per_question world_passages world_questions k eval_k eval_questions "
    "default_topk max_topk max_queries max_batch max_body_bytes max_query_chars chunk_size max_seq_length "
    "max_length hnsw_m hnsw_ef_construction hnsw_ef_search ef_search serve_max_model_len tensor_parallel_size "
    "data_parallel_size cpu_kvcache_gib per_device_train_batch_size per_device_eval_batch_size "
    "gradient_accumulation_steps num_generations max_completion_length generation_batch_size "
    "steps_per_generation num_iterations lora_r lora_alpha balance_ratio cpu_lm_head_tile_tokens "
    "cpu_lm_head_tile_vocab"
)
_FRACTIONS = (
    "validation_fraction heldout_fraction two_hop_fraction comparison_fraction distractor_rate "
    "paraphrase_rate conflict_rate copy_max_fraction max_copied gpu_memory_utilization "
    "reranker_gpu_memory_utilization vllm_gpu_memory_utilization judge_tau lexical_threshold top_p "
    "warmup_ratio lora_dropout b"
)
_NON_NEGATIVES = (
    "temperature min_ratio max_ratio learning_rate lr weight_decay max_grad_norm num_train_epochs epochs "
    "warmup_steps beta epsilon alpha k1 delta request_timeout_s startup_timeout_s keep_alive_s "
    "dataloader_num_workers top_logprobs max_logprobs max_model_len task_eval_samples min_pass doc_max_words "
    "num_records negatives_per_question"
)
BOUNDS: dict[str, tuple[float | None, float | None]] = {
    **dict.fromkeys(_COUNTS.split(), _COUNT),
    **dict.fromkeys(_FRACTIONS.split(), _FRACTION),
    **dict.fromkeys(_NON_NEGATIVES.split(), _NON_NEGATIVE),
    "port": (0, 65535),
    "max_steps": (1, None),  # or -1: the epochs decide (ALSO)
}
# values a bounded field also takes, outside its bounds, with what they mean
ALSO: dict[str, dict[float, str]] = {"max_steps": {-1: "the epochs decide"}}
# fields whose 0 means nothing (a cadence: 0 would save / evaluate / log at every step, or never)
POSITIVE = ("save_steps", "eval_steps", "logging_steps")
# fields that take `auto`: name -> "module:function", called with every parsed value and returning (value, why);
# imported only when a config says auto (r3forge.precision imports torch, which `r3forge data ...` never needs)
AUTO: dict[str, str] = {"bf16": "r3forge.precision:auto_bf16"}

# field metadata read by r3forge, not argparse: bounds here, model arguments in `r3forge.models.locate`
OWN_METADATA = frozenset({"min", "max", "model", "model_serve", "model_when"})
# id(parsed config) -> {field: where its value came from}; an entry goes when its config is collected
_ORIGINS: dict[int, dict[str, str]] = {}
# id(parsed config) -> {field: "auto -> <value> (<why>)"} for the fields an `auto` resolved
_RESOLVED: dict[int, dict[str, str]] = {}


class _Auto:
    """The value `auto` of an AUTO field between the YAML/flag conversion and its resolution."""

    def __repr__(self) -> str:
        return "'auto'"


AUTO_VALUE = _Auto()


def field_bounds(f: dataclasses.Field) -> tuple[float | None, float | None]:
    """A field's inclusive (min, max): its metadata's "min" / "max", else its name's `BOUNDS` entry."""
    low, high = BOUNDS.get(f.name, (None, None))
    return f.metadata.get("min", low), f.metadata.get("max", high)


def bounds_text(low: float | None, high: float | None) -> str:
    """'>= 1', '<= 5' or 'in [0, 1]'.

    >>> bounds_text(1, None), bounds_text(0, 1)
    ('>= 1', 'in [0, 1]')
    """
    if low is not None and high is not None:
        return f"in [{low:g}, {high:g}]"
    return f">= {low:g}" if low is not None else f"<= {high:g}"


def where(config: Any, name: str) -> str:
    """Where field `name` of a config `parse_config` returned got its value: `file.yaml:3: key 'model'`,
    `flag '--model'`, or `default 'model'` (also for a config built in code)."""
    return _ORIGINS.get(id(config), {}).get(name, f"default '{name}'")


def resolved(config: Any) -> dict[str, str]:
    """The fields of a config `parse_config` returned whose `auto` it resolved: {field: "auto -> False (why)"}.

    >>> from dataclasses import dataclass
    >>> @dataclass
    ... class Run:
    ...     bf16: bool = False
    >>> resolved(parse_config((Run,), ["--bf16", "true"])[0])
    {}
    """
    return dict(_RESOLVED.get(id(config), {}))


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
    except UnicodeDecodeError as e:
        line = text_line(path.read_bytes(), e.start)
        raise ConfigError(
            f"{path}:{line}: not UTF-8 text (byte {e.object[e.start]:#04x} at offset {e.start})"
        ) from e
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


def text_line(data: bytes, offset: int) -> int:
    """The 1-based line of byte `offset` in `data`.

    >>> text_line(b"a: 1\\nb: \\xff", 8)
    2
    """
    return data.count(b"\n", 0, offset) + 1


def _convert(action: argparse.Action, value: Any, where: str, listable: bool = False) -> Any:
    """Convert one YAML value with the argparse action's own type function (as the CLI would). `listable`:
    the field's type admits a list although its flag takes one value (TrainingArguments' `report_to: str |
    list[str]`, which the resolved config of a run holds as a list): a YAML list is converted item by item."""
    many = action.nargs in ("+", "*") or isinstance(action.nargs, int) or listable
    if isinstance(value, dict) and (many or action.type in (int, float)):
        raise ConfigError(
            f"{where}: expected {'a list' if many else 'a single value'}, got a mapping {value!r}"
        )
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


class _Parser(HfArgumentParser):
    """argparse's own errors (a required field missing, a flag's value of the wrong type) as `ConfigError`,
    one line, instead of the usage text and exit code 2; r3forge's own metadata keys kept from argparse."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise ConfigError(f"{message} (see --help)")

    @staticmethod
    def _parse_dataclass_field(parser: argparse.ArgumentParser, field: dataclasses.Field) -> None:
        if OWN_METADATA & set(field.metadata):  # HfArgumentParser hands every other key to add_argument
            field = copy.copy(field)
            field.metadata = types.MappingProxyType(
                {k: v for k, v in field.metadata.items() if k not in OWN_METADATA}
            )
        HfArgumentParser._parse_dataclass_field(parser, field)


def _check_ranges(
    fields: dict[str, dataclasses.Field], values: dict[str, Any], origins: dict[str, str]
) -> None:
    """Every value set by YAML or a flag within its field's bounds (`field_bounds`); lists item by item."""
    for name, origin in origins.items():
        low, high = field_bounds(fields[name])
        value = values.get(name)
        if name in POSITIVE and isinstance(value, int | float) and not isinstance(value, bool) and value <= 0:
            raise ConfigError(
                f"{origin}: must be > 0 (a step count, or a fraction of the run's steps), got {value!r}"
            )
        if (low is None and high is None) or value is None:
            continue
        # a field with its own bounds (metadata) has its own meaning: the name's ALSO values do not apply
        also = {} if {"min", "max"} & set(fields[name].metadata) else ALSO.get(name, {})
        for v in value if isinstance(value, list) else [value]:
            if isinstance(v, bool) or not isinstance(v, int | float) or v in also:
                continue
            if math.isnan(v) or (low is not None and v < low) or (high is not None and v > high):
                unset = " or unset (no limit)" if fields[name].default is None else ""
                also = "".join(f" or {k:g} ({why})" for k, why in also.items())
                raise ConfigError(f"{origin}: must be {bounds_text(low, high)}{unset}{also}, got {v!r}")


def _flag_origins(parser: argparse.ArgumentParser, argv: Sequence[str]) -> dict[str, str]:
    """dest -> "flag '--x'" for every flag given in `argv` (the last one of a dest wins, as in argparse)."""
    by_flag = {s: a.dest for a in parser._actions for s in a.option_strings}
    origins = {}
    for token in argv:
        flag = token.split("=", 1)[0]
        if flag in by_flag and by_flag[flag] not in ("help", "config"):
            origins[by_flag[flag]] = f"flag '{flag}'"
    return origins


def _remember(config: Any, origins: dict[str, str], notes: dict[str, str]) -> None:
    names = {f.name for f in dataclasses.fields(config)}
    _ORIGINS[id(config)] = {k: v for k, v in origins.items() if k in names}
    _RESOLVED[id(config)] = {k: v for k, v in notes.items() if k in names}
    weakref.finalize(config, _ORIGINS.pop, id(config), None)
    weakref.finalize(config, _RESOLVED.pop, id(config), None)


def _accept_auto(action: argparse.Action) -> None:
    """Let an AUTO field's flag and YAML key take `auto` (kept as AUTO_VALUE until `_resolve_auto`)."""
    convert = action.type

    def typed(value: str) -> Any:
        if value.strip().lower() == "auto":
            return AUTO_VALUE
        try:
            return convert(value)
        except (TypeError, ValueError, argparse.ArgumentTypeError) as e:
            raise argparse.ArgumentTypeError(
                f"invalid value {value!r} ({str(e).rstrip('.')}; or auto)"
            ) from e

    typed.__name__ = getattr(convert, "__name__", "value")  # argparse names it in "invalid <name> value"
    action.type = typed
    action.help = (action.help or "") + " 'auto': decided by this machine (see r3forge.config.AUTO)."


def _resolve_auto(values: dict[str, Any], origins: dict[str, str]) -> dict[str, str]:
    """Replace each `auto` by what its AUTO function decides from the other values; {field: what and why}."""
    notes = {}
    for name, target in AUTO.items():
        if values.get(name) is AUTO_VALUE:
            module, _, function = target.partition(":")
            value, why = getattr(importlib.import_module(module), function)(values)
            values[name] = value
            notes[name] = f"auto -> {value} ({why})"
            origins[name] = f"{origins.get(name, f'default {name!r}')} (auto -> {value}: {why})"
    return notes


def _add_bounds_to_help(parser: argparse.ArgumentParser, fields: dict[str, dataclasses.Field]) -> None:
    """`--help` shows each bounded field's range."""
    for action in parser._actions:
        f = fields.get(action.dest)
        if f is not None and action.help and field_bounds(f) != (None, None):
            action.help += f" [{bounds_text(*field_bounds(f))}]"


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
    parser = _Parser(tuple(dataclass_types), prog=prog, allow_abbrev=False)
    parser.add_argument("--config", type=str, default=None, help="YAML file with defaults for any field.")
    actions = _dest_actions(parser)
    fields = {f.name: f for t in dataclass_types for f in dataclasses.fields(t) if f.init}
    _add_bounds_to_help(parser, fields)
    for name in AUTO.keys() & actions.keys():
        _accept_auto(actions[name])
    origins: dict[str, str] = {}
    listable = _list_fields(dataclass_types)
    for key, value in (defaults or {}).items():
        if key not in actions:
            raise ConfigError(f"{prog or 'parse_config'}: default for unknown field '{key}'")
        _set_default(parser, key, value)
    config_path = _config_flag(argv)
    if config_path is not None:
        data, lines = load_yaml_with_lines(config_path)
        for key, value in data.items():
            origin = f"{config_path}:{lines.get(key, 1)}: key '{key}'"
            if key not in actions:
                raise ConfigError(
                    f"{config_path}:{lines.get(key, 1)}: unknown key '{key}'{_closest(key, actions)}"
                )
            action = actions[key]
            _set_default(parser, key, _convert(action, value, origin, key in listable))
            action.required = False
            origins[key] = origin
    flags = {s for a in parser._actions for s in a.option_strings}
    for token in argv:
        flag = token.split("=", 1)[0]
        if flag.startswith("--") and flag not in flags:
            raise ConfigError(f"unknown flag '{flag}'{_closest(flag, sorted(flags))}")
    namespace, remaining = parser.parse_known_args(args=argv)
    if remaining:
        raise ConfigError(f"unrecognized arguments: {' '.join(remaining)}")
    origins |= _flag_origins(parser, argv)
    values = vars(namespace)
    _check_ranges(fields, values, origins)
    notes = _resolve_auto(values, origins)
    configs = []
    try:  # as HfArgumentParser.parse_args_into_dataclasses, once the ranges are checked
        for t in dataclass_types:
            config = t(**{f.name: values[f.name] for f in dataclasses.fields(t) if f.init})
            _remember(config, origins, notes)
            configs.append(config)
    except ValueError as e:  # a config class's own validation (__post_init__), e.g. TrainingArguments'
        hint = " (on a machine without a GPU set bf16: false or auto)" if "bf16" in str(e) else ""
        raise ConfigError(f"{config_path or 'command-line flags'}: invalid settings: {e}{hint}") from e
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
    """Write the resolved config(s) as one YAML mapping that `--config` can read back.

    `overwrite` is saved as false: a rerun from the saved file resumes its run instead of moving it aside.
    """
    merged: dict[str, Any] = {}
    for c in configs:
        merged.update(config_to_dict(c))
    if merged.get("overwrite"):
        merged["overwrite"] = False
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(merged, sort_keys=False, allow_unicode=True), encoding="utf-8")
    return path


def missing_help(dataclass_type: type) -> list[str]:
    """Names of fields that lack `metadata={"help": ...}` (every config field must have help text)."""
    return [f.name for f in dataclasses.fields(dataclass_type) if f.init and not f.metadata.get("help")]
