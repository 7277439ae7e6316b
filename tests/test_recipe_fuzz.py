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
