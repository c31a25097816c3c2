import dataclasses
from dataclasses import dataclass, field
from typing import Literal

import pytest
import yaml
from trl import SFTConfig

from r3forge.config import (
    config_to_dict,
    load_yaml_with_lines,
    missing_help,
    parse_config,
    save_config,
    where,
)
from r3forge.errors import ConfigError


@dataclass
class Train:
    learning_rate: float = field(default=1e-5, metadata={"help": "Peak learning rate."})
    num_epochs: int = field(default=3, metadata={"help": "Epochs."})
    name: str = field(default="run", metadata={"help": "Run name."})
    packing: bool = field(default=False, metadata={"help": "Pack sequences."})
    mode: Literal["full", "lora"] = field(default="full", metadata={"help": "Fine-tuning mode."})
    tags: list[str] = field(default_factory=lambda: ["a"], metadata={"help": "Tags."})
    eval_steps: int | None = field(default=None, metadata={"help": "Eval interval."})


@dataclass
class Data:
    dataset: str = field(metadata={"help": "Dataset path (required)."})


def write(tmp_path, text, name="c.yaml"):
    p = tmp_path / name
    p.write_text(text)
    return str(p)


def test_defaults_yaml_then_cli_precedence(tmp_path):
    cfg = write(
        tmp_path, "learning_rate: 2e-5\nnum_epochs: 5\ndataset: d.jsonl\ntags: [x, y]\npacking: true\n"
    )
    train, data = parse_config((Train, Data), ["--config", cfg, "--num_epochs", "7"])
    assert train.learning_rate == pytest.approx(2e-5)  # YAML "2e-5" (a string for PyYAML) converted to float
    assert train.num_epochs == 7  # CLI beats YAML
    assert train.tags == ["x", "y"] and train.packing is True and train.name == "run"
    assert data.dataset == "d.jsonl"


def test_config_equals_form_and_no_config(tmp_path):
    cfg = write(tmp_path, "dataset: a\n")
    (_, data) = parse_config((Train, Data), [f"--config={cfg}"])
    assert data.dataset == "a"
    (train, data) = parse_config((Train, Data), ["--dataset", "b", "--mode", "lora", "--eval_steps", "10"])
    assert (train.mode, train.eval_steps, data.dataset) == ("lora", 10, "b")


def test_unknown_yaml_key_names_file_line_and_closest(tmp_path):
    cfg = write(tmp_path, "dataset: a\n\nlerning_rate: 1e-4\n")
    with pytest.raises(ConfigError) as e:
        parse_config((Train, Data), ["--config", cfg])
    msg = str(e.value)
    assert f"{cfg}:3" in msg and "lerning_rate" in msg and "did you mean 'learning_rate'" in msg


def test_unknown_cli_flag_names_closest():
    with pytest.raises(ConfigError, match=r"--num_epoch'.*did you mean '--num_epochs'"):
        parse_config((Train, Data), ["--dataset", "a", "--num_epoch", "2"])


def test_bad_yaml_value_names_file_line_and_key(tmp_path):
    cfg = write(tmp_path, "dataset: a\nnum_epochs: three\n")
    with pytest.raises(ConfigError, match=r"c\.yaml:2: key 'num_epochs': invalid value 'three'"):
        parse_config((Train, Data), ["--config", cfg])
    cfg = write(tmp_path, "dataset: a\nnum_epochs: 1.5\n", "d.yaml")
    with pytest.raises(ConfigError, match=r"d\.yaml:2"):  # no silent truncation of 1.5 to 1
        parse_config((Train, Data), ["--config", cfg])
    cfg = write(tmp_path, "dataset: a\nmode: qlora\n", "e.yaml")
    with pytest.raises(ConfigError, match=r"e\.yaml:2.*choose from \['full', 'lora'\]"):
        parse_config((Train, Data), ["--config", cfg])


def test_bad_yaml_documents(tmp_path):
    with pytest.raises(ConfigError, match=r"dup\.yaml:3: duplicate key 'a' \(first at line 1\)"):
        load_yaml_with_lines(write(tmp_path, "a: 1\nb: 2\na: 3\n", "dup.yaml"))
    with pytest.raises(ConfigError, match=r"bad\.yaml:2: invalid YAML"):
        load_yaml_with_lines(write(tmp_path, "a: 1\nb: c: d\n", "bad.yaml"))
    with pytest.raises(ConfigError, match=r"list\.yaml:1: a config file must be a mapping"):
        load_yaml_with_lines(write(tmp_path, "- 1\n- 2\n", "list.yaml"))
    with pytest.raises(ConfigError, match=r"missing\.yaml: cannot read"):
        parse_config((Train,), ["--config", str(tmp_path / "missing.yaml")])
    with pytest.raises(ConfigError, match="--config needs a path"):
        parse_config((Train,), ["--config"])


def test_save_config_round_trips(tmp_path):
    train, data = parse_config(
        (Train, Data), ["--dataset", "z", "--tags", "p", "q", "--learning_rate", "3e-4"]
    )
    path = save_config((train, data), tmp_path / "run" / "config.yaml")
    assert yaml.safe_load(path.read_text())["tags"] == ["p", "q"]
    train2, data2 = parse_config((Train, Data), ["--config", str(path)])
    assert config_to_dict(train2) == config_to_dict(train) and data2 == data


@dataclass
class Out:
    overwrite: bool = field(default=False, metadata={"help": "Move an existing run aside."})


def test_saved_config_never_carries_overwrite(tmp_path):
    (out,) = parse_config((Out,), ["--overwrite", "true"])
    path = save_config([out], tmp_path / "config.yaml")
    assert (
        yaml.safe_load(path.read_text())["overwrite"] is False
    )  # a rerun from it resumes, never moves it aside
    assert out.overwrite is True  # the live config is untouched


def test_trl_sft_config_through_yaml(tmp_path):
    cfg = write(
        tmp_path, "learning_rate: 1.0e-5\nper_device_train_batch_size: 4\noutput_dir: out\nmax_length: 512\n"
    )
    (sft,) = parse_config((SFTConfig,), ["--config", cfg, "--gradient_accumulation_steps", "8", "--use_cpu"])
    assert (sft.learning_rate, sft.per_device_train_batch_size, sft.gradient_accumulation_steps) == (
        1e-5,
        4,
        8,
    )
    assert sft.max_length == 512 and sft.use_cpu is True


@dataclass
class Switches:
    dedup: bool = field(
        default=True, metadata={"help": "A True-default bool: HfArgumentParser adds --no_dedup."}
    )


@pytest.mark.parametrize("value", ["false", "False", "no", "0"])
def test_yaml_false_turns_off_a_true_default_bool(tmp_path, value):
    # argparse takes a dest's default from its first action (--dedup), not from --no_dedup
    (sw,) = parse_config((Switches,), ["--config", write(tmp_path, f"dedup: {value}\n")])
    assert sw.dedup is False
    (sw,) = parse_config((Switches,), ["--config", write(tmp_path, "dedup: false\n"), "--dedup", "true"])
    assert sw.dedup is True  # the flag still overrides the YAML
    (sw,) = parse_config((Switches,), ["--config", write(tmp_path, "dedup: true\n"), "--no_dedup"])
    assert sw.dedup is False
    (sw,) = parse_config((Switches,), [], defaults={"dedup": False})
    assert sw.dedup is False


def test_trl_gradient_checkpointing_off_from_yaml(tmp_path):
    # TRL's SFTConfig defaults gradient_checkpointing to True; the CPU YAMLs turn it off
    cfg = write(tmp_path, "output_dir: out\nuse_cpu: true\ngradient_checkpointing: false\n")
    (sft,) = parse_config((SFTConfig,), ["--config", cfg])
    assert sft.gradient_checkpointing is False


def test_missing_help_detects_fields():
    @dataclass
    class Bad:
        x: int = 1
        y: int = field(default=2, metadata={"help": "ok"})

    assert missing_help(Bad) == ["x"]
    assert missing_help(Train) == [] and dataclasses.is_dataclass(Train)


def test_resolved_sft_config_reads_back(tmp_path):
    """A run's config.yaml holds TrainingArguments' report_to as a list (its type admits one although the
    flag takes a single value); --config must read it back."""
    (sft,) = parse_config((SFTConfig,), ["--output_dir", "out", "--report_to", "tensorboard", "--use_cpu"])
    path = save_config([sft], tmp_path / "config.yaml")
    assert yaml.safe_load(path.read_text())["report_to"] == ["tensorboard"]
    (again,) = parse_config((SFTConfig,), ["--config", str(path)])
    assert again.report_to == ["tensorboard"] and again.output_dir == "out"
    with pytest.raises(ConfigError, match="expected a single value"):
        parse_config((SFTConfig,), ["--config", write(tmp_path, "learning_rate: [1, 2]\n", "bad.yaml")])


@dataclass
class Sized:
    batch_size: int = field(default=16, metadata={"help": "Items per call."})
    max_questions: int | None = field(default=None, metadata={"help": "First N questions (unset: all)."})
    validation_fraction: float = field(default=0.1, metadata={"help": "Share held out."})
    top_m: list[int] = field(default_factory=lambda: [1, 3], metadata={"help": "Top-M values."})
    top_k: int = field(default=0, metadata={"help": "Own bounds.", "min": 0, "max": 8})
    port: int = field(default=8000, metadata={"help": "Port."})


def test_ranges_by_name_and_metadata_name_the_flag_or_file_line(tmp_path):
    with pytest.raises(ConfigError, match=r"^flag '--batch_size': must be >= 1, got 0$"):
        parse_config((Sized,), ["--batch_size", "0"])
    with pytest.raises(
        ConfigError, match=r"^flag '--batch-size': must be >= 1, got -2$"
    ):  # the alias, as typed
        parse_config((Sized,), ["--batch-size=-2"])
    with pytest.raises(
        ConfigError, match=r"flag '--max_questions': must be >= 1 or unset \(no limit\), got 0"
    ):
        parse_config((Sized,), ["--max_questions", "0"])
    with pytest.raises(ConfigError, match=r"flag '--top_m': must be >= 1, got 0"):  # list items one by one
        parse_config((Sized,), ["--top_m", "5", "0"])
    with pytest.raises(ConfigError, match=r"flag '--top_k': must be in \[0, 8\], got 9"):  # metadata wins
        parse_config((Sized,), ["--top_k", "9"])
    cfg = write(tmp_path, "batch_size: 4\nvalidation_fraction: 1.5\n")
    with pytest.raises(
        ConfigError, match=rf"^{cfg}:2: key 'validation_fraction': must be in \[0, 1\], got 1.5$"
    ):
        parse_config((Sized,), ["--config", cfg])
    with pytest.raises(ConfigError, match="'--validation_fraction': must be in"):
        parse_config((Sized,), ["--validation_fraction", "nan"])
    (ok,) = parse_config(
        (Sized,), ["--config", cfg, "--validation_fraction", "0", "--port", "0", "--top_k", "0"]
    )
    assert (ok.validation_fraction, ok.port, ok.max_questions, ok.top_k) == (0.0, 0, None, 0)


def test_ranges_reach_trl_fields_before_its_own_checks():
    with pytest.raises(ConfigError, match="flag '--per_device_train_batch_size': must be >= 1, got 0"):
        parse_config((SFTConfig,), ["--per_device_train_batch_size", "0", "--bf16", "false"])
    with pytest.raises(ConfigError, match="flag '--learning_rate': must be >= 0"):
        parse_config((SFTConfig,), ["--learning_rate=-0.1", "--bf16", "false"])


def test_argparse_errors_are_config_errors_and_help_shows_bounds(capsys):
    with pytest.raises(ConfigError, match="required: --dataset"):
        parse_config((Train, Data), [])
    with pytest.raises(ConfigError, match="argument --batch_size/--batch-size: invalid int value: 'x'"):
        parse_config((Sized,), ["--batch_size", "x"])
    with pytest.raises(SystemExit) as done:
        parse_config((Sized,), ["--help"])
    assert done.value.code == 0
    shown = " ".join(capsys.readouterr().out.split())
    assert "Items per call. [>= 1]" in shown and "Share held out. [in [0, 1]]" in shown


def test_where_names_the_origin_of_each_value(tmp_path):
    cfg = write(tmp_path, "dataset: d.jsonl\n\nlearning_rate: 2e-5\n")
    train, data = parse_config((Train, Data), ["--config", cfg, "--num_epochs", "2"])
    assert where(data, "dataset") == f"{cfg}:1: key 'dataset'"
    assert where(train, "learning_rate") == f"{cfg}:3: key 'learning_rate'"
    assert where(train, "num_epochs") == "flag '--num_epochs'"
    assert where(train, "name") == "default 'name'"
    assert where(Train(), "name") == "default 'name'"  # built in code
