#!/usr/bin/env bash
# Set up (if needed), lint, then run the test suite (pass pytest arguments through,
# e.g. `bash scripts/test.sh -m slow` for the long cases).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
. .venv/bin/activate
ruff check tqbuild tests bench
mypy tqbuild  # config and its two justified exemptions: pyproject.toml [tool.mypy]
python -m pytest -q --durations=25 "$@"
