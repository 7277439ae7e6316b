"""`tq-build upload`: verify, then send an artifact to the Hugging Face Hub.

The token comes from huggingface_hub's usual places (HF_TOKEN, the cached
login). `--dry-run` prints the plan — repository, visibility, every file with
size and sha256, the lock check — and sends nothing."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .errors import BadInput, VerificationFailed
from .io.hashing import sha256_file
from .pipeline.lock import entry_for_artifact, read_lock
from .verify import verify_artifact, verify_locked


def upload(artifact: Path, repo_id: str, *, private: bool, dry_run: bool, lock: Path,
           echo=print) -> None:
    artifact = Path(artifact)
    if "/" not in repo_id or repo_id.count("/") != 1:
        raise BadInput(f"repository id {repo_id!r} is not org/name", fix="e.g. me/smollm2-q4")
    meta_file = artifact / "optiq_metadata.json"
    gate = (json.loads(meta_file.read_text()).get("quality") or {}).get("gate") \
        if meta_file.is_file() else None
    if gate and gate.get("passed") is False:
        raise VerificationFailed(f"refusing to upload {artifact}: its recorded quality gate "
                                 f"failed ({'; '.join(gate['failures'])})",
                                 fix="rebuild with a recipe whose `evaluate` gates pass")
    problems = verify_artifact(artifact)
    locked = lock.is_file() and entry_for_artifact(read_lock(lock), artifact, lock.parent)
    if locked:
        problems += verify_locked(artifact, lock)
    if problems:
        raise VerificationFailed(f"refusing to upload {artifact}: {problems[0]}",
                                 fix="rebuild it (tq-build RECIPE) and verify again")
    files = sorted(f for f in artifact.rglob("*") if f.is_file())
    plan: dict[str, Any] = {"repo_id": repo_id, "private": private, "artifact": str(artifact),
            "lock": f"matches {lock}" if locked else "not in a lock (verified against its "
            "own metadata only)",
            "files": [{"path": f.relative_to(artifact).as_posix(), "size": f.stat().st_size,
                       "sha256": sha256_file(f)} for f in files]}
    if dry_run:
        echo(json.dumps(plan, indent=2))
        echo(f"dry run: {len(files)} file(s), {sum(x['size'] for x in plan['files'])} bytes "
             f"would go to https://huggingface.co/{repo_id}; nothing was sent")
        return
    try:
        from huggingface_hub import HfApi
    except ImportError:
        raise BadInput("huggingface_hub is not installed", fix="pip install huggingface_hub"
                       ) from None
    api = HfApi()
    api.create_repo(repo_id, private=private, exist_ok=True, repo_type="model")
    api.upload_folder(folder_path=str(artifact), repo_id=repo_id, repo_type="model",
                      commit_message=f"tq-build upload of {artifact.name}")
    echo(f"uploaded {len(files)} file(s) to https://huggingface.co/{repo_id}")
