"""tq-build command line. Thin: parse, call the library, print.

Exit codes: 0 ok, 1 internal error, 2 bad input, 3 verification failed,
130 interrupted.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Annotated, NoReturn

import typer
from typer._click.exceptions import ClickException

from .environment import fast_blas_reexec
from .errors import BadInput, TQError, VerificationFailed
from .eval.compare import compare
from .eval.run import evaluate
from .eval.run import render as render_eval
from .eval.sensitivity import METHODS, sensitivity, write_table
from .inspect_artifact import inspect, render
from .io.atomic import write_json
from .io.hash_cache import HashCache
from .io.paths import describe as describe_os_error
from .io.paths import writable_file
from .kernels.codec_check import codec_check
from .kernels.trellis_codes import CODES
from .kv.goldens import check_file
from .pipeline.api import Prepared, prepare, record_in_lock, run, up_to_date
from .pipeline.distributed import Dist
from .pipeline.evaluate import summary as quality_summary
from .pipeline.events import JsonLog
from .pipeline.executor import BuildOptions
from .pipeline.launch import torchrun
from .pipeline.lock import check_entry, read_lock
from .pipeline.lock import default_lock_path as find
from .pipeline.report import describe
from .recipe import KMap, load, recipe_json_schema, recipe_reference_markdown
from .runtime.torch_load import load_torch
from .upload import upload
from .verify import cross_runtime, verify_artifact, verify_locked

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Offline quantization build tool: `tq-build RECIPE.yaml` builds it.")

OutputOpt = Annotated[Path | None, typer.Option("--output", "-o",
                                                   help="Override the recipe's output dir.")]
WorkdirOpt = Annotated[Path | None, typer.Option("--workdir",
                                                    help="Override the recipe's work dir root.")]


def _log(msg: str) -> None:
    typer.echo(msg, err=True)


def _prepare(recipe_path: Path, workdir: Path | None, overrides: list[str] | None = None,
             output: Path | None = None) -> Prepared:
    return prepare(recipe_path, workdir, overrides or (), output, log=_log)


@app.command()
def build(
    recipe: Annotated[Path, typer.Argument(help="Recipe YAML file.")],
    output: OutputOpt = None,
    workdir: WorkdirOpt = None,
    force: Annotated[bool, typer.Option(help="Replace an output dir that holds "
                                              "something else.")] = False,
    rerun_layers: Annotated[str | None, typer.Option(
        "--rerun-layers", help="Recompute these layers even if checkpointed, e.g. 3,7-9 "
        "(in `propagate` mode everything downstream too).")] = None,
    device: Annotated[str, typer.Option(help="cpu, cuda or cuda:N for Hessians and "
                                             "GPTQ.")] = "cpu",
    set_: Annotated[list[str] | None, typer.Option(
        "--set", help="Override a recipe value, validated like the YAML, e.g. "
        "--set stages.rotate.seed=7 (recorded in the metadata).")] = None,
    log_json: Annotated[Path | None, typer.Option(
        "--log-json", help="Append one JSON event per unit (start/end, seconds, peak "
        "memory, proxy error, guard events) to this file.")] = None,
    threads: Annotated[int | None, typer.Option(
        help="CPU threads for torch (default: torch's own choice).")] = None,
    ignore_disk: Annotated[bool, typer.Option(
        "--ignore-disk", help="Start even if the disk looks too small.")] = False,
    lock: Annotated[Path | None, typer.Option(
        help="artifacts.lock to update (default: at the repository root of the recipe).")
    ] = None,
    no_lock: Annotated[bool, typer.Option("--no-lock", help="Do not read or update "
                                          "artifacts.lock.")] = False,
    nproc: Annotated[int, typer.Option(
        "--nproc", min=1, help="Spread the build over N processes launched with torchrun "
        "(one GPU each with --device cuda, gloo CPU processes otherwise); the artifact "
        "is byte-identical to a one-process build (on CPU: at the same --threads, since "
        "CPU matmuls round by thread count; CPU ranks default to cores/N). Several "
        "hosts: run "
        "`torchrun --nnodes ... -m tqbuild RECIPE` on each.")] = 1,
) -> None:
    """Build the artifact a recipe describes.

    Example: tq-build recipes/smollm2-rot-rtn4.yaml --output out/smol
    """
    layers = parse_layers(rerun_layers) if rerun_layers else set()
    if threads is not None:
        import torch

        torch.set_num_threads(max(1, threads))
    launcher = nproc > 1 and "WORLD_SIZE" not in os.environ
    dist = Dist() if launcher else Dist.from_env(device)
    if not dist.lead:  # rank 0 resolves first (a GGUF source is imported once)
        dist.share(None)
    prepared = _prepare(recipe, workdir, set_, output)  # bad input: exit 2
    r, plan, out = prepared.recipe, prepared.plan, prepared.output
    if dist.lead:
        dist.share(None)
    if log_json is not None:
        writable_file(log_json, what="event log", where="--log-json",
                      fix="choose a file in a writable directory")
    lock_path = None if no_lock else (lock or default_lock_path(recipe))
    fresh = dist.lead and lock_path is not None and not force and not layers and \
        up_to_date(prepared, lock_path)
    if dist.share(fresh):
        if dist.lead:
            typer.echo(f"{r.name}: up to date ({lock_path}); nothing to do (--force rebuilds)")
        return
    again = " ".join(["tq-build", *sys.argv[2 if sys.argv[1:2] == ["build"] else 1:]])
    if launcher:
        try:
            code = torchrun(nproc, sys.argv[1:])
        except KeyboardInterrupt:
            code = 130
        if code == 130:
            typer.echo(f"interrupted: resume with: {again}", err=True)
        raise SystemExit(code)
    events = None
    if log_json is not None and dist.lead:
        events = JsonLog(log_json)
    try:
        res = run(prepared, BuildOptions(force=force, rerun_layers=frozenset(layers),
                                         device=device, ignore_disk=ignore_disk),
                  log=_log, events=events, dist=dist)
    except (KeyboardInterrupt, Exception) as e:
        if not interrupted(e):
            raise
        if dist.lead:
            typer.echo(f"interrupted: finished layers are checkpointed in the work dir; "
                       f"resume with: {again}", err=True)
        raise SystemExit(130) from None
    dist.close()
    if not dist.lead:
        return
    if lock_path is not None:
        record_in_lock(prepared, lock_path)
    ranks = f", {dist.world} ranks" if dist.world > 1 else ""
    typer.echo(f"built {out} in {res.seconds:.1f} s ({len(res.shards)} shard(s), "
               f"{len(res.computed)}/{len(plan.units)} units computed{ranks})")
    if res.quality:
        typer.echo(quality_summary(res.quality))


def default_lock_path(recipe: Path) -> Path:
    return find(recipe)


def parse_layers(spec: str) -> set[int]:
    """'3,7-9' -> {3, 7, 8, 9}."""

    out: set[int] = set()
    for part in spec.split(","):
        try:
            lo, _, hi = part.strip().partition("-")
            out.update(range(int(lo), int(hi or lo) + 1))
        except ValueError:
            raise BadInput(f"--rerun-layers: {part!r} is not a layer number or range",
                           fix="use a list like 3,7-9") from None
    return out


@app.command()
def plan(
    recipe: Annotated[Path, typer.Argument(help="Recipe YAML file.")],
    workdir: WorkdirOpt = None,
    set_: Annotated[list[str] | None, typer.Option("--set", help="Override a recipe value.")
                    ] = None,
) -> None:
    """Print the compiled stage graph without touching weights."""

    typer.echo(describe(_prepare(recipe, workdir, set_).plan))


@app.command("inspect")
def inspect_cmd(
    artifact: Annotated[Path, typer.Argument(help="An artifact directory.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Per-module format/bits/shape/bytes, bits per weight, transforms, calibration,
    guard events.

    Example: tq-build inspect out/smollm2-rot-gptq4 --json
    """
    import json

    info = inspect(artifact)
    typer.echo(json.dumps(info, indent=2) if as_json else render(info))


@app.command("schema")
def schema_cmd(
    markdown: Annotated[bool, typer.Option("--markdown", help="The recipe reference as "
                                           "Markdown instead.")] = False,
) -> None:
    """Print the recipe's JSON Schema (for editors), or its Markdown reference."""
    import json

    typer.echo(recipe_reference_markdown() if markdown
               else json.dumps(recipe_json_schema(), indent=2))


@app.command("status")
def status_cmd(
    lock: Annotated[Path, typer.Option(help="The lock file.")] = Path("artifacts.lock"),
    names: Annotated[list[str] | None, typer.Argument(help="Recipe names (default: all "
                                                      "in the lock).")] = None,
) -> None:
    """Per locked recipe: is its artifact up to date? (recipe hash, then inputs, then
    outputs; exit 3 if anything is stale)."""

    if not lock.is_file():
        raise BadInput(f"no lock file at {lock}", fix="build a recipe first, or pass --lock")
    data = read_lock(lock)
    cache = HashCache(lock.parent / ".tq-work" / "hash-cache.json")
    stale = []
    for name in names or sorted(data["recipes"]):
        entry = data["recipes"].get(name)
        if entry is None:
            raise BadInput(f"{name} is not in {lock}", fix="build it, or check the name")
        found = check_entry(entry, lock.parent, cache)
        if found:
            stale.append(name)
            typer.echo(f"{name}: STALE — {found[0]}"
                       + (f" (+{len(found) - 1} more)" if len(found) > 1 else ""))
        else:
            typer.echo(f"{name}: up to date")
    cache.save()
    if stale:
        raise VerificationFailed(f"{len(stale)} recipe(s) not up to date: {', '.join(stale)}",
                                 fix="rebuild them: tq-build RECIPE")


@app.command("verify")
def verify_cmd(
    artifact: Annotated[Path, typer.Argument(help="An artifact directory.")],
    locked: Annotated[bool, typer.Option("--locked", help="Prove the artifact is byte for "
                                         "byte the one artifacts.lock names.")] = False,
    lock: Annotated[Path, typer.Option(help="The lock file.")] = Path("artifacts.lock"),
    source: Annotated[Path | None, typer.Option(help="Also report perplexity, mean KL "
                                                "and greedy tokens/s against this source "
                                                "(model dir, .gguf or recipe).")] = None,
    device: Annotated[str, typer.Option(help="cpu | cuda[:N]")] = "cpu",
    runtimes: Annotated[bool, typer.Option(help="Compare the torch and MLX runtimes' "
                                           "logits on a fixed prompt.")] = True,
    stream: Annotated[bool, typer.Option(help="--source quality one decoder layer at a time "
                                         "(no greedy speed: that needs the whole model).")
                      ] = False,
) -> None:
    """Check an artifact: every quantized module decodes to the values its build
    recorded (bit-exact); the runtimes agree on a fixed prompt; with --locked, every
    file against artifacts.lock; with --source, quality and speed."""
    import json

    problems = verify_artifact(artifact)
    if locked:
        problems += verify_locked(artifact, lock)
    if runtimes and not problems:
        found, info = cross_runtime(artifact, device)
        problems += found
        typer.echo(json.dumps(info))
    if source is not None and not problems:
        r = evaluate(artifact, source, device=device, probe=False, tokens=1024,
                     workdir=Path(".tq-work"), stream=stream)
        typer.echo(json.dumps({k: r[k] for k in ("perplexity", "mean_kl", "top1_agreement",
                                                  "bits_per_weight", "device", "streamed")}))
        if not stream:
            typer.echo(json.dumps(_greedy_speed(artifact, device)))
    for p in problems:
        typer.echo(f"FAIL {p}", err=True)
    if problems:
        raise VerificationFailed(f"{artifact}: {len(problems)} problem(s); first: "
                                 f"{problems[0]}", fix=_verify_fix(problems[0], artifact))
    typer.echo(f"{artifact}: OK" + (" (matches artifacts.lock)" if locked else ""))


def _verify_fix(problem: str, artifact: Path) -> str:
    """What a user can do about the first problem `verify` found."""
    if "runtimes disagree" in problem:
        return ("the artifact's tensors decode as built, so the difference is in a runtime: "
                "install the versions requirements.txt pins (mlx, mlx-lm, transformers, "
                "torch), rerun, and report it with this output if it persists; "
                "`--no-runtimes` checks the files alone")
    if "non-finite" in problem:
        return "the weights decode as built but overflow; rebuild with a smaller damp or bits"
    return (f"the files of {artifact} are not what its build wrote: rebuild it with "
            "`tq-build RECIPE --force` (a resumable work dir makes that quick) or restore "
            "them from where it was published")


def _greedy_speed(artifact: Path, device: str) -> dict:
    import time

    import torch

    model = load_torch(artifact, packed=True, device=device)
    ids = torch.arange(3, 19)[None].to(device)
    model.generate(ids, max_new_tokens=4, do_sample=False)
    t = time.perf_counter()
    model.generate(ids, max_new_tokens=32, min_new_tokens=32, do_sample=False)
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    return {"greedy_tokens_per_s": round(32 / (time.perf_counter() - t), 2), "device": device}


@app.command("upload")
def upload_cmd(
    artifact: Annotated[Path, typer.Argument(help="An artifact directory.")],
    repo_id: Annotated[str, typer.Argument(help="Hub repository, e.g. org/name.")],
    private: Annotated[bool, typer.Option(help="Create the repository private.")] = False,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print what would be sent; "
                                          "send nothing.")] = False,
    lock: Annotated[Path, typer.Option(help="The lock file.")] = Path("artifacts.lock"),
) -> None:
    """Upload an artifact to the Hugging Face Hub after verifying it (and, when the
    lock names it, that it is the locked build)."""

    upload(artifact, repo_id, private=private, dry_run=dry_run, lock=lock, echo=typer.echo)


EvalSource = Annotated[Path, typer.Option("--source", help="The source: model dir, .gguf "
                                          "or the recipe that built the artifact.")]


@app.command("eval")
def eval_cmd(
    artifact: Annotated[Path, typer.Argument(help="An artifact directory.")],
    source: Annotated[Path | None, typer.Option(
        "--source", help="The source: model dir, .gguf or the recipe that built the "
        "artifact (KL / perplexity mode).")] = None,
    tasks: Annotated[str | None, typer.Option(
        help="lm-evaluation-harness tasks, comma-separated (task mode: accuracy through "
        "lm-eval's HF backend on the tq-build runtime).")] = None,
    limit: Annotated[int | None, typer.Option(help="Task mode: items per task.")] = None,
    num_fewshot: Annotated[int | None, typer.Option(help="Task mode: few-shot examples.")
                           ] = None,
    include_path: Annotated[Path | None, typer.Option(
        help="Task mode: a directory of your own task YAMLs.")] = None,
    text: Annotated[Path | None, typer.Option(help="Held-out text (default: the "
                                              "repository's python-stdlib docstrings).")] = None,
    tokens: Annotated[int, typer.Option(help="Tokens of held-out text.")] = 4096,
    top_k: Annotated[int, typer.Option("--top-k", help="Teacher logits kept per "
                                       "position in the dump.")] = 1024,
    device: Annotated[str, typer.Option(help="cpu | cuda[:N]")] = "cpu",
    workdir: Annotated[Path, typer.Option(help="Where teacher dumps are cached.")] = Path(
        ".tq-work"),
    probe: Annotated[bool, typer.Option(help="Run the EOS probe.")] = True,
    json_out: Annotated[Path | None, typer.Option("--json", help="Write the result "
                                                  "here.")] = None,
    stream: Annotated[bool, typer.Option(help="Teacher and artifact run one layer at a time "
                                         "(peak memory: one layer, not the model).")] = False,
) -> None:
    """Perplexity, mean KL vs a cached teacher dump, top-1 and the EOS probe
    (--source); or task accuracy through lm-evaluation-harness (--tasks)."""
    import json

    if tasks:
        try:
            from .eval.lm_eval_adapter import run_tasks
        except ImportError:
            raise BadInput("lm-evaluation-harness is not installed",
                           fix="pip install lm-eval") from None
        res = run_tasks(artifact, [t for t in tasks.split(",") if t], device=device,
                        limit=limit, include_path=include_path, num_fewshot=num_fewshot)
        if json_out:
            write_json(json_out, res)
        typer.echo(json.dumps(res, indent=1))
        return
    if source is None:
        raise BadInput("tq-build eval needs --source (KL / perplexity) or --tasks",
                       fix="e.g. tq-build eval out/x --source recipes/x.yaml")
    r = evaluate(artifact, source, text=text, tokens=tokens, top_k=top_k, device=device,
                 workdir=workdir, probe=probe, stream=stream)
    if json_out:
        write_json(json_out, r)
    typer.echo(render_eval([r]))
    typer.echo(json.dumps({k: v for k, v in r.items() if k != "eos_probe"}))


@app.command("compare")
def compare_cmd(
    artifacts: Annotated[list[Path], typer.Argument(help="Artifact directories.")],
    source: EvalSource,
    tokens: Annotated[int, typer.Option(help="Tokens of held-out text.")] = 4096,
    device: Annotated[str, typer.Option(help="cpu | cuda[:N]")] = "cpu",
    workdir: Annotated[Path, typer.Option(help="Where teacher dumps are cached.")] = Path(
        ".tq-work"),
    out: Annotated[Path, typer.Option(help="Directory for compare.json and "
                                      "kl_vs_bpw.png.")] = Path("compare"),
) -> None:
    """Tabulate bpw, size, perplexity, KL, top-1 and the EOS probe of several
    artifacts (one teacher dump) and draw KL against bits per weight."""

    typer.echo(compare(artifacts, source, tokens=tokens, device=device, workdir=workdir,
                       out=out))


@app.command("sensitivity")
def sensitivity_cmd(
    recipe: Annotated[Path, typer.Argument(help="A recipe with `bits: {kmap, budget}` rules.")],
    method: Annotated[str, typer.Option(help="noise | trellis (trellis rules), affine rules "
                                        "always use RTN")] = "noise",
    tokens: Annotated[int, typer.Option(help="Tokens of held-out text.")] = 512,
    out: Annotated[Path | None, typer.Option(help="Table to write (default: the recipe's "
                                             "kmap path).")] = None,
    workdir: WorkdirOpt = None,
    set_: Annotated[list[str] | None, typer.Option("--set", help="Recipe override.")] = None,
    stream: Annotated[bool, typer.Option(help="Hold one decoder layer at a time (default); "
                                         "--no-stream loads the folded model whole.")] = True,
    device: Annotated[str, typer.Option(help="cpu | cuda[:N]")] = "cpu",
) -> None:
    """Measure per tensor the KL cost of quantizing only that tensor at each candidate
    k / bits; write the {tensor: {k: loss}} table the allocators read."""

    if method not in METHODS:
        raise BadInput(f"unknown method {method!r}", fix=f"use one of {', '.join(METHODS)}")
    r = load(recipe, set_ or ())
    if out is None:
        q = r.stage("quantize")
        km = next((x.bits for x in (q.default, *q.rules) if isinstance(x.bits, KMap)
                   and x.bits.kmap), None) if q else None
        if km is None or km.kmap is None:
            raise BadInput("the recipe names no kmap file", fix="pass --out FILE")
        out = Path(km.kmap) if Path(km.kmap).is_absolute() else Path(r.file).parent / km.kmap
    timings: dict = {}
    t0 = time.perf_counter()
    table = sensitivity(recipe, method=method, tokens=tokens, overrides=set_ or (),
                        workdir=Path(workdir or r.workdir), log=_log, stream=stream,
                        device=device, timings=timings)
    per_layer = timings.get("seconds_per_layer", [])
    write_table(table, out, {"recipe": r.name, "method": method, "tokens": tokens,
                             "stream": stream, "device": device,
                             "seconds": round(time.perf_counter() - t0, 2),
                             "seconds_per_layer": [round(x, 3) for x in per_layer],
                             "metric": "mean KL(folded reference || one tensor quantized)"})
    typer.echo(f"wrote {out} ({len(table)} tensors)")


@app.command("codec-check")
def codec_check_cmd(
    L: Annotated[int, typer.Option("--L", help="trellis state bits")] = 12,
    k: Annotated[int, typer.Option("--k", help="bits per weight")] = 2,
    code: Annotated[str, typer.Option("--code", help="1mad | 3inst | mul1 | pair")] = "1mad",
    T: Annotated[int, typer.Option("--T", help="weights per tail-biting block")] = 256,
    sequences: Annotated[int, typer.Option("--sequences")] = 4096,
    device: Annotated[str, typer.Option("--device", help="cpu | cuda[:N]")] = "cpu",
    seed: Annotated[int, typer.Option("--seed")] = 0,
) -> None:
    """Quantize i.i.d. N(0,1) sequences with the tail-biting trellis; print one JSON line."""
    import json

    if code not in CODES:
        raise BadInput(f"unknown code {code!r}", fix=f"use one of {', '.join(CODES)}")
    if L not in (12, 16) and not 4 <= L <= 20:
        raise BadInput(f"--L {L} is out of range", fix="use 12 or 16")
    if code == "pair" and not 9 <= L <= 16:
        raise BadInput(f"--L {L}: the pair code's table index needs 9 <= L <= 16", fix="use 16")
    top = L // 4 if code == "pair" else L // 2  # the pair code shifts 2k bits a step
    if not 1 <= k <= top:
        raise BadInput(f"--k {k} must be in 1..{top} for L = {L} (code {code})",
                       fix="use k = 1..4 (pair: k <= L/4)")
    if T * k < L or sequences < 1:
        raise BadInput(f"T = {T} weights at k = {k} cannot hold an L = {L} bit state "
                       "(or --sequences < 1)", fix="use T = 256")
    if device.startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            raise BadInput("--device cuda but no CUDA device is visible", fix="use --device cpu")
    typer.echo(json.dumps(codec_check(L, k, code, T, sequences, device, seed)))


kv_app = typer.Typer(help="TurboQuant KV-cache codec.", no_args_is_help=True)
app.add_typer(kv_app, name="kv")


@kv_app.command("check-goldens")
def kv_check_goldens(
    files: Annotated[list[Path], typer.Argument(help="Golden .npz files.")],
) -> None:
    """Re-encode golden inputs in `reference` mode; every array must match bit for bit.

    Example: tq-build kv check-goldens ../shared/goldens/turboquant/*.npz
    """

    bad = 0
    for f in files:
        rep = check_file(f)
        status = "ok" if not rep.mismatches else f"{len(rep.mismatches)} MISMATCHED"
        typer.echo(f"{rep.file}: {rep.checked} arrays, {status}")
        for m in rep.mismatches:
            typer.echo(f"  mismatch: {m}")
        bad += len(rep.mismatches)
    if bad:
        raise VerificationFailed(f"{bad} array(s) differ from the goldens",
                                 fix="the reference-mode codec no longer reproduces them")


@kv_app.command("eval")
def kv_eval(
    model: Annotated[Path, typer.Argument(help="An mlx-lm loadable model dir (HF or MLX).")],
    text: Annotated[Path, typer.Option(help="Held-out text file.")] = Path(
        "data/eval/python-stdlib-docstrings.txt"),
    tokens: Annotated[int, typer.Option(help="Tokens to score.")] = 512,
    chunk: Annotated[int, typer.Option(help="Tokens appended to the cache per step.")] = 64,
    out: Annotated[Path, typer.Option(help="Where kv_eval.json and kv_eval.png go.")] = Path(
        "bench/results/kv_eval"),
) -> None:
    """Teacher-forced KL of each KV scheme vs the unquantized cache, with bytes per token.

    Example: tq-build kv eval out/smollm2-fold
    """

    fast_blas_reexec()
    if not model.is_dir():
        raise BadInput(f"model {model} is not a directory", fix="pass an mlx-lm model dir")
    if not text.is_file():
        raise BadInput(f"text file {text} does not exist", fix="pass --text FILE")
    from .kv.evaluate import evaluate, table, write

    result = evaluate(model, text.read_text(), tokens=tokens, chunk=chunk)
    write(result, out)
    typer.echo(table(result))
    typer.echo(f"wrote {out}/kv_eval.json and kv_eval.png")


_signalled = False


def _on_signal(signum: int, frame: object) -> None:
    """Stop like Ctrl-C, and remember it: a library that catches the KeyboardInterrupt
    and raises its own error instead (safetensors mid-read does) still stops cleanly."""
    global _signalled
    _signalled = True
    raise KeyboardInterrupt


def interrupted(e: BaseException) -> bool:
    """Whether `e` is (or came out of) a stop signal rather than a fault."""
    return isinstance(e, KeyboardInterrupt) or _signalled


def _stop_interrupted() -> NoReturn:
    """A command stopped by a signal: say so, exit 130 (no traceback)."""
    typer.echo("interrupted", err=True)
    raise SystemExit(130) from None


def _stop_on_signals() -> None:
    """Every command (build, eval, sensitivity …) stops like Ctrl-C on SIGTERM, and on
    SIGINT even where it came in ignored (a job started in the background, `cmd &`)."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        return  # only the main thread may install handlers (an embedding caller)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, _on_signal)


def main(argv: list[str] | None = None) -> None:
    _stop_on_signals()
    argv = list(sys.argv[1:] if argv is None else argv)
    commands = {c.name or getattr(c.callback, "__name__", "") for c in app.registered_commands}
    commands |= {g.name for g in app.registered_groups} | {"--help"}
    if argv and argv[0] not in commands and not argv[0].startswith("-"):
        argv.insert(0, "build")  # `tq-build RECIPE.yaml` == `tq-build build RECIPE.yaml`
    try:
        app(args=argv, standalone_mode=False)
    except TQError as e:
        typer.echo(f"error: {e}", err=True)
        raise SystemExit(e.exit_code) from None
    except KeyboardInterrupt:
        _stop_interrupted()
    except OSError as e:
        if interrupted(e):
            _stop_interrupted()
        if e.filename is None:
            raise
        typer.echo(f"error: {str(e.filename)[:200]}: {describe_os_error(e)}\n  fix: check the path "
                   "(it must exist, be readable, and be a plain file or directory as "
                   "the command expects)", err=True)
        raise SystemExit(2) from None
    except typer.Exit as e:
        raise SystemExit(e.exit_code) from None
    except typer.Abort:
        raise SystemExit(130) from None
    except ClickException as e:  # usage errors (typer's vendored click): show, exit 2
        e.show()
        raise SystemExit(e.exit_code) from None
    except Exception as e:
        if not interrupted(e):
            raise
        _stop_interrupted()


if __name__ == "__main__":
    main()
