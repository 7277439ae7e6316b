"""A seeded mutator feeds 1,500 broken recipes to the loader: every one either
loads or is rejected with a RecipeError naming file:line — never another
exception (which the CLI would print as a traceback)."""

from __future__ import annotations

import random
import re

import pytest

from tqbuild.errors import RecipeError
from tqbuild.recipe import load

BASE = """name: fuzz
source: {path: /nonexistent/model}
output: out/fuzz
workdir: .tq-work
calibration:
  source: {self_generated: true}
  samples: 16
  seq_len: 64
  seed: 0
  hessians: original
stages:
  - untie
  - norm_fold
  - rotate: {r1: random_hadamard, r2: off, seed: 42}
  - calibrate
  - quantize:
      default: {method: gptq, format: affine, bits: 4, group_size: 64, damp: 0.01}
      rules:
        - {match: 'mlp\\.down_proj', bits: 6, act_order: true}
        - {match: 'lm_head', format: none}
      guard: {scale_ratio: 4.0, max_damp: 10.0}
  - write: {shard_size: 2GB, dtype: bfloat16}
"""

JUNK = ["", "0", "-1", "3.5", "true", "null", "[]", "{}", "'x'", "[1, 2]", "{a: 1}", "~",
        "1e999", "nan", "four", "'mlp\\\\.('", "\"\\u0000\"", "2GB", "-5GB", "*alias", "&a x",
        "!!python/object:os.system x", "|", ">", "'", "{", "]", "  ", "\t", "?", "- -"]


def mutate(text: str, rng: random.Random) -> str:
    lines = text.splitlines()
    for _ in range(rng.randint(1, 3)):
        op = rng.randrange(8)
        i = rng.randrange(len(lines))
        if op == 0:  # drop a line
            lines.pop(i)
        elif op == 1:  # duplicate a line
            lines.insert(i, lines[i])
        elif op == 2:  # replace a value
            if ":" in lines[i]:
                k = lines[i].split(":", 1)[0]
                lines[i] = f"{k}: {rng.choice(JUNK)}"
        elif op == 3:  # replace a value inside a flow mapping
            lines[i] = re.sub(r": ([^,}]+)", lambda m: ": " + rng.choice(JUNK), lines[i],
                              count=1)
        elif op == 4:  # rename a key
            lines[i] = re.sub(r"(\w+):", lambda m: m.group(1)[::-1] + ":", lines[i], count=1)
        elif op == 5:  # swap two lines (stage order, nesting)
            j = rng.randrange(len(lines))
            lines[i], lines[j] = lines[j], lines[i]
        elif op == 6:  # break indentation
            lines[i] = " " * rng.choice([0, 1, 3, 5]) + lines[i].lstrip()
        else:  # insert junk
            lines.insert(i, rng.choice(JUNK + ["extra: 1", "- bogus_stage", "stages: 3"]))
        if not lines:
            lines = [""]
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("chunk", range(3))
def test_mutated_recipes_never_crash_the_loader(tmp_path, chunk):
    assert load_text(tmp_path, BASE).name == "fuzz"
    rng = random.Random(1000 + chunk)
    rejected = 0
    for n in range(500):
        text = mutate(BASE, rng)
        try:
            load_text(tmp_path, text)
        except RecipeError as e:
            rejected += 1
            assert e.exit_code == 2
            assert e.where and re.match(r".*r\.yaml:\d+$", e.where), (e.where, text)
            assert e.fix, text
        except Exception as e:  # noqa: BLE001 - the point of the test
            pytest.fail(f"mutation {n}: {type(e).__name__}: {e}\n---\n{text}")
    assert rejected > 200  # the mutator really breaks things


def load_text(tmp_path, text):
    p = tmp_path / "r.yaml"
    p.write_text(text)
    return load(p)


# ---- user paths: every bad path in a recipe, an override or an option exits 2 ----

PATH_RECIPE = """name: pfuzz
source: {{path: {src}}}
output: out/pfuzz
workdir: .tq-work
stages:
  - untie
  - quantize:
      default: {{method: rtn, bits: 4, group_size: 32}}
      rules:
        - {{match: 'mlp\\.up_proj', format: trellis, bits: {{kmap: k.json, budget: 3}},
           trellis: {{T: 64}}}}
"""
PATH_KEYS = ("source", "output", "workdir", "kmap")


def bad_paths(d, rng: random.Random) -> list[str]:
    """Paths no build can use, each a member of the class issue 23 names."""
    import os

    f = d / "plain.txt"
    f.write_text("x")
    fifo = d / "fifo.gguf"
    if not fifo.exists():
        os.mkfifo(fifo)
    loop_a, loop_b = d / "loop_a", d / "loop_b"
    if not loop_a.is_symlink():
        loop_a.symlink_to(loop_b)
        loop_b.symlink_to(loop_a)
    n = rng.randint(256, 600)
    return [
        "x" * n,  # a component over NAME_MAX
        "/".join(["deep"] * rng.randint(900, 1500)),  # the whole path over PATH_MAX
        f"{d}/" + "y" * n + "/z",
        "a\x00b", "line\nbreak", "tab\there", "bell\x07",
        f"{f}/inside",  # a path through an existing file
        str(fifo), f"{fifo}/x",  # a FIFO where a file or directory is expected
        str(loop_a), f"{loop_a}/x",  # a symlink loop
        "/proc/self/mem/x", "/dev/null", "/dev/null/x", "",
    ]


def _quoted(s: str) -> str:
    return '"' + s.encode("unicode_escape").decode().replace('"', '\\"') + '"'


@pytest.fixture(scope="module")
def tiny_src(tmp_path_factory):
    from tiny import make_model, save_bf16

    d = tmp_path_factory.mktemp("pfuzz")
    return save_bf16(make_model("llama"), d / "src")


def _cli(argv, capsys) -> tuple[int, str]:
    from tqbuild.cli import main

    try:
        main(argv)
        code = 0
    except SystemExit as e:
        code = e.code
    except Exception as e:  # noqa: BLE001 - the point of the test
        pytest.fail(f"{argv}: {type(e).__name__}: {e}")
    return code, capsys.readouterr().err


def test_bad_paths_in_recipes_exit_2_with_line_and_fix(tmp_path, tiny_src, capsys, monkeypatch):
    import json

    monkeypatch.chdir(tmp_path)  # relative paths land here, never in the checkout
    row = {"2": 1.0, "3": 0.5, "4": 0.25}
    (tmp_path / "k.json").write_text(json.dumps(
        {f"model.layers.{i}.mlp.up_proj": row for i in range(2)}))
    base = PATH_RECIPE.format(src=tiny_src)
    rng = random.Random(23)
    r = tmp_path / "r.yaml"
    r.write_text(base)
    assert _cli(["plan", str(r)], capsys)[0] == 0  # the base recipe is fine
    tried = 0
    for bad in bad_paths(tmp_path, rng):
        for key in PATH_KEYS:
            lines = base.splitlines()
            i = next(n for n, ln in enumerate(lines) if f"{key}:" in ln)
            if key == "kmap":
                lines[i] = lines[i].replace("k.json", _quoted(bad))
            elif key == "source" and rng.random() < 0.5:
                lines[i] = f"source: {_quoted(bad)}"  # the string form of `source`
            else:
                value = f"{key}: {_quoted(bad)}"
                lines[i] = re.sub(rf"{key}: .*?(}})?$",
                                  lambda m, v=value: v + (m.group(1) or ""), lines[i])
            r.write_text("\n".join(lines) + "\n")
            code, err = _cli(["plan", str(r)], capsys)
            tried += 1
            assert code == 2, (key, bad[:80], err)
            assert err.startswith("error: ") and "\n  fix: " in err and "Traceback" not in err
            assert re.match(r"error: .*r\.yaml:\d+: ", err), (key, bad[:80], err)
    assert tried == len(PATH_KEYS) * len(bad_paths(tmp_path, rng))


@pytest.mark.parametrize("opt", ["--output", "--workdir", "--log-json", "--set"])
def test_bad_paths_from_the_command_line_exit_2(tmp_path, tiny_src, capsys, opt, monkeypatch):
    monkeypatch.chdir(tmp_path)  # relative paths land here, never in the checkout
    r = tmp_path / "r.yaml"
    r.write_text(PATH_RECIPE.format(src=tiny_src).split("      rules:")[0])
    for bad in bad_paths(tmp_path, random.Random(7)):
        if not bad or "\x00" in bad and opt != "--set" or opt == "--log-json" and \
                bad == "/dev/null":
            continue  # "" is the current dir; argv cannot hold a NUL; /dev/null takes appends
        arg = [f"output={_quoted(bad)}"] if opt == "--set" else [bad]
        cmd = ["plan", str(r), opt, *arg] if opt == "--workdir" else \
            ["build", str(r), opt, *arg, "--no-lock"]
        code, err = _cli(cmd, capsys)
        assert code == 2, (opt, bad[:80], err)
        assert err.startswith("error: ") and "\n  fix: " in err, (opt, bad[:80], err)
    for bad in ("x" * 300, f"{tmp_path}/r.yaml/x", str(tmp_path / "fifo.gguf")):
        code, err = _cli(["plan", bad], capsys)  # the recipe path itself
        assert code == 2 and "recipe file" in err and "fix:" in err, err


def test_calibration_globs_match_only_regular_files(tmp_path):
    import os

    from tqbuild.errors import SourceError
    from tqbuild.recipe import CalibrateParams
    from tqbuild.stages.calib_data import from_files

    (tmp_path / "a.txt").write_text("text " * 100)
    os.mkfifo(tmp_path / "b.txt")  # reading it would block forever
    p = CalibrateParams.model_validate({"source": {"files": str(tmp_path / "*.txt")},
                                        "samples": 2, "seq_len": 8})
    with pytest.raises(SourceError, match="FIFO") as e:
        from_files(p.source.files, None, p, "r.yaml:3")
    assert e.value.where == "r.yaml:3" and e.value.fix
