"""folder_settings: the table of which settings are a run folder's identity, and older owner records read today."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from r3forge.folder_settings import FORMAT, IDENTITY, TRAINED_BY, upgraded
from r3forge.runfolder import OWNER, RunFolderError, claim, read_owner
from r3forge.training.cpu import CPUSettings


def test_the_training_identity_leaves_out_every_cpu_setting_and_keeps_the_objective() -> None:
    cpu = {f.name for f in dataclasses.fields(CPUSettings)}
    assert cpu <= set(IDENTITY["sft"].leave_out) and IDENTITY["grpo"] == IDENTITY["sft"]
    assert {"learning_rate", "beta", "reward_weights", "seed"} <= set(TRAINED_BY)
    assert not cpu & set(TRAINED_BY)


def _owner_v1(folder: Path, reward_weights: list[float] | None) -> None:
    """A GRPO folder as r3forge wrote it before owner/2: the recipe filled reward_weights in after its claim."""
    folder.mkdir()
    record = {
        "format": "r3forge.owner/1",
        "kind": "grpo",
        "settings": {"beta": 0.001, "reward_weights": reward_weights},
    }
    (folder / OWNER).write_text(json.dumps(record))
    (folder / "checkpoint-16").mkdir()  # it has produced something: its settings are compared


def test_an_older_grpo_folder_resumes_under_the_reward_weights_its_recipe_used(tmp_path: Path) -> None:
    old = tmp_path / "grpo"
    _owner_v1(old, None)
    claim(old, "grpo", {"beta": 0.001, "reward_weights": [1.0, 0.0]})  # the same run: no error
    owner = read_owner(old)  # the record stays as written (its creation time too); it reads as owner/2
    assert owner is not None and owner["format"] != FORMAT and upgraded(owner)["reward_weights"] == [1.0, 0.0]
    with pytest.raises(RunFolderError, match=r"reward_weights: \[1.0, 0.0\] there vs \[1.0, 0.5\] here"):
        claim(old, "grpo", {"beta": 0.001, "reward_weights": [1.0, 0.5]})


def test_the_upgrade_touches_only_the_format_and_kind_it_names() -> None:
    sft = {"format": "r3forge.owner/1", "kind": "sft", "settings": {"reward_weights": None}}
    assert upgraded(sft) == {"reward_weights": None}
    explicit = {"format": "r3forge.owner/1", "kind": "grpo", "settings": {"reward_weights": [0.5, 0.5]}}
    assert upgraded(explicit) == {"reward_weights": [0.5, 0.5]}
