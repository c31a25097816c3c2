"""Upload a release folder to a Hugging Face Hub model repo (or any Hub-compatible endpoint).

`huggingface_hub` does the work (repo creation, branch creation, the preupload/commit protocol, Xet
transfer of large files); this module adds the checks and turns every failure into one `PushError` that
names the repo, the endpoint and what to do, because the raw errors (an HTTP 401 from the create call, an
offline-mode flag, a refused connection) rarely say which setting is wrong.
"""

from __future__ import annotations

import os
from pathlib import Path

from huggingface_hub import HfApi, get_token
from huggingface_hub.errors import HfHubHTTPError, OfflineModeIsEnabled

from r3forge.release.export import ReleaseError

LOGIN_HINT = "set HF_TOKEN, run `hf auth login` (formerly `huggingface-cli login`) or pass --hub_token"


class PushError(ReleaseError):
    """A push to the Hub failed: the message names the repo, the endpoint and the likely fix."""


def push_folder(
    folder: str | os.PathLike[str],
    repo_id: str,
    private: bool = False,
    revision: str | None = None,
    token: str | None = None,
    endpoint: str | None = None,
) -> str:
    """Create the model repo (if needed) and the branch `revision` (if not main), upload `folder` as one
    commit; returns the commit URL.

    `token` defaults to $HF_TOKEN or the cached login, `endpoint` to $HF_ENDPOINT or huggingface.co.
    `private` applies only when the repo is created (an existing repo keeps its visibility).
    """
    folder = Path(folder)
    if not (folder / "README.md").is_file() or not any(
        (folder / name).is_file() for name in ("config.json", "adapter_config.json")
    ):
        raise PushError(
            f"{folder}: not a release folder (README.md and config.json or adapter_config.json); "
            "create one with `r3forge export --run <run> --out <folder>`"
        )
    api = HfApi(endpoint=endpoint or None, token=token or None)
    branch = revision if revision and revision != "main" else None
    try:
        api.create_repo(repo_id, private=private, exist_ok=True, repo_type="model")
        if branch:
            api.create_branch(repo_id, branch=branch, exist_ok=True, repo_type="model")
        info = api.upload_folder(
            repo_id=repo_id,
            folder_path=folder,
            repo_type="model",
            revision=branch,
            commit_message=f"r3forge export ({folder.name})",
        )
    except Exception as e:  # HTTP status, connection, offline mode, validation: all reported the same way
        raise PushError(_explain(e, repo_id, api.endpoint, revision, token)) from e
    return str(info.commit_url)


def _explain(error: Exception, repo_id: str, endpoint: str, revision: str | None, token: str | None) -> str:
    where = f"{endpoint}/{repo_id}" + (f" (branch {revision})" if revision else "")
    status = getattr(getattr(error, "response", None), "status_code", None)
    if isinstance(error, OfflineModeIsEnabled):
        hint = "HF_HUB_OFFLINE is set: unset it (or set HF_HUB_OFFLINE=0) to push"
    elif isinstance(error, HfHubHTTPError) and status == 401:
        found = token or get_token()
        hint = ("the token was rejected" if found else "no Hub token found") + f": {LOGIN_HINT}"
    elif isinstance(error, HfHubHTTPError) and status == 403:
        owner = repo_id.split("/")[0] if "/" in repo_id else "your account"
        hint = f"the token may not write to '{owner}': use a token with write access ({LOGIN_HINT})"
    elif isinstance(error, HfHubHTTPError) and status == 404:
        hint = "repo or endpoint not found: check the repo id (owner/name) and --hub_endpoint / $HF_ENDPOINT"
    elif _is_transport_error(error):
        hint = f"cannot reach {endpoint}: check the network, --hub_endpoint or $HF_ENDPOINT"
    else:
        hint = f"check the repo id, the endpoint and the token ({LOGIN_HINT})"
    detail = " ".join(str(error).split())  # one line: the Hub's errors span several
    return f"push to {where} failed: {type(error).__name__}: {detail} ({hint})"


def _is_transport_error(error: Exception) -> bool:
    """A connection/timeout failure, whichever HTTP client huggingface_hub uses (httpx, then its httpx2
    fork: matched by class name, so neither needs to be imported here)."""
    if isinstance(error, ConnectionError | TimeoutError):
        return True
    return any(cls.__name__ == "TransportError" for cls in type(error).__mro__)
