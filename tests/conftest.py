import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import pytest  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def goldens() -> Path:
    p = ROOT.parent / "shared" / "goldens"
    if not p.is_dir():
        pytest.skip("../shared/goldens not present")
    return p
