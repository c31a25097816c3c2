import dataclasses
from dataclasses import dataclass, field
from typing import Literal

import pytest
import yaml
from trl import SFTConfig

from r3forge.config import config_to_dict, load_yaml_with_lines, missing_help, parse_config, save_config
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
