"""`r3forge export --run <dir> --out <dir> [--merge_lora] [--push <repo_id>] [--private] [--revision <branch>]
[--license <id>] [--overwrite]`: an SFT run folder -> a release folder (-> a Hub model repo)."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field

from r3forge.config import parse_config
from r3forge.errors import ConfigError
from r3forge.release.export import export_run
from r3forge.release.push import push_folder


@dataclass
class ExportArgs:
    run: str = field(metadata={"help": "SFT run folder (run.json, config.yaml, final/, ...); only read."})
    out: str = field(metadata={"help": "Release folder to write (outside the run folder)."})
    merge_lora: bool = field(
        default=False,
        metadata={"help": "LoRA runs: merge the adapter into the base (a plain transformers/vLLM model)."},
    )
    license: str | None = field(
        default=None,
        metadata={"help": "License id for the model card; default: the base model's if known, else other."},
    )
    overwrite: bool = field(default=False, metadata={"help": "Replace a non-empty --out folder."})
    push: str | None = field(default=None, metadata={"help": "Hub model repo id to upload the release to."})
    private: bool = field(default=False, metadata={"help": "With --push: create the repo as private."})
    revision: str | None = field(
        default=None, metadata={"help": "With --push: branch to upload to (created if missing)."}
    )
    hub_endpoint: str | None = field(
        default=None, metadata={"help": "With --push: Hub URL; default: $HF_ENDPOINT or huggingface.co."}
    )
    hub_token: str | None = field(
        default=None, metadata={"help": "With --push: Hub token; default: $HF_TOKEN or the cached login."}
    )


def main(argv: list[str]) -> int:
    (args,) = parse_config((ExportArgs,), argv, prog="r3forge export")
    if not args.push:
        hub_flags = {"--private": args.private, "--revision": args.revision}
        hub_flags |= {"--hub_endpoint": args.hub_endpoint, "--hub_token": args.hub_token}
        if used := [flag for flag, value in hub_flags.items() if value]:
            raise ConfigError(f"{', '.join(used)} only apply with --push <repo_id>")
    out = export_run(
        args.run,
        args.out,
        merge_lora=args.merge_lora,
        license=args.license,
        repo_id=args.push,
        overwrite=args.overwrite,
    )
    print(f"exported {args.run} -> {out}")
    if args.push:
        url = push_folder(out, args.push, args.private, args.revision, args.hub_token, args.hub_endpoint)
        print(f"pushed {out} -> {url}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
