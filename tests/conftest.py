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


@pytest.fixture(scope="session")
def tiny_source(tmp_path_factory):
    """tiny_source(family="llama", seed=0) -> a bf16 checkpoint of tests/tiny.py's
    model, made once per session (builds only read their source)."""
    from tiny import make_model, save_bf16

    made: dict[tuple[str, int], Path] = {}

    def get(family: str = "llama", seed: int = 0) -> Path:
        if (family, seed) not in made:
            d = tmp_path_factory.mktemp(f"src-{family}-{seed}")
            made[(family, seed)] = save_bf16(make_model(family, seed), d / "src")
        return made[(family, seed)]

    return get


def write_recipe(path: Path, *, source: Path, stages: list, name: str = "t",
                 output: str | Path = "out", **top) -> Path:
    """A recipe file from plain data (yaml-dumped, so no quoting by hand);
    `stages`: names or one-key mappings, as in the YAML."""
    import yaml

    data = {"name": name, "source": {"path": str(source)}, "output": str(output), **top,
            "stages": stages}
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def pytest_collection_modifyitems(config, items):
    """`slow` cases run only when asked for (`-m slow`, or TQ_SLOW=1 for everything)."""
    import os

    if "slow" in (config.getoption("-m") or "") or os.environ.get("TQ_SLOW") == "1":
        return
    skip = pytest.mark.skip(reason="slow: run with -m slow (or TQ_SLOW=1)")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)
