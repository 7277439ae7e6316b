"""Run a compiled plan one unit (embed, layer i, head) at a time.

Phase 1 computes every unit whose checkpoint is missing or stale (its
fingerprint covers everything it depends on): read the unit's source tensors,
fold, capture Hessians by running the layer on the calibration activations,
quantize, checkpoint. Phase 2 streams the checkpoints into shards in a temp
output dir and renames it into place. A killed build resumes at phase 1 and,
since phase 2 reads only checkpoints, writes a byte-identical artifact.
Under torchrun the same code runs on every rank (pipeline/distributed.py):
samples and tensors are spread over the ranks; rank 0 owns the work dir and
writes the artifact."""

from __future__ import annotations

import errno
import json
import shutil
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from ..errors import OutputError
from ..formats import FORMATS
from ..formats.dequant import dequantize_module, module_entry
from ..inspect_artifact import inspect
from ..io.atomic import replace_dir, write_json
from ..io.hash_cache import HashCache
from ..io.hashing import sha256_file
from ..io.hfconfig import artifact_config, quantization_entry
from ..io.layout import to_artifact, to_hf
from ..io.source import Source
from ..io.writer import ShardWriter
from ..recipe import CalibrateParams
from ..stages import rotate
from ..stages.affine import DTYPES
from ..stages.calib_data import calibration_ids, token_hash
from ..stages.hessian import HessianCapture, head_hessian
from ..stages.layer_forward import LayerRunner
from ..stages.quantize import encode_tensor
from . import fingerprints as fp
from .activations import ActivationStream
from .build_report import write_report
from .card import render_card
from .distributed import Dist
from .evaluate import raise_if_failed, run_evaluation
from .folds import fold_unit
from .graph import Plan, Unit, estimate_sizes
from .metadata import build_metadata
from .workdir import RankWorkDir, WorkDir, fingerprint


def overlap_host_work(device: str) -> bool:
    """Assemble each tensor in a helper thread beside the next one's quantization:
    on a GPU (the host work is idle time there), not on CPU builds (cores shared)."""
    return torch.device(device).type == "cuda"


@dataclass
class BuildResult:
    output: Path
    seconds: float
    shards: list[str]
    modules: dict
    computed: list[str] = field(default_factory=list)  # units (re)computed this run
    quality: dict | None = None  # the evaluate stage's record, if the recipe has one


def check_output(output: Path, recipe_name: str, force: bool) -> None:
    meta = output / "optiq_metadata.json"
    if output.exists() and not force:
        prev = None
        if meta.is_file():
            try:
                prev = json.loads(meta.read_text())["recipe"]["name"]
            except (ValueError, KeyError):
                prev = None
        if prev != recipe_name:
            raise OutputError(f"output directory {output} exists and is not a build of "
                              f"recipe {recipe_name!r}",
                              fix="choose another --output, delete it, or pass --force")
    try:
        output.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise OutputError(f"cannot create the output's parent directory {output.parent}: "
                          f"{e.strerror}", fix="choose a writable --output") from None


def check_disk(plan: Plan, output: Path, workdir: Path) -> None:
    """Refuse to start when the target filesystems cannot hold what the build writes."""

    sizes = estimate_sizes(plan)
    need: dict[int, tuple[Path, int]] = {}
    for path, n in ((output.parent, sizes["output"]), (workdir, sizes["workdir"])):
        p = path
        while not p.exists():
            p = p.parent
        dev = p.stat().st_dev
        need[dev] = (p, need.get(dev, (p, 0))[1] + n)
    for p, n in need.values():
        free = shutil.disk_usage(p).free
        if free < n:
            raise OutputError(
                f"not enough disk space at {p}: the build writes about {n / 2**30:.2f} GiB, "
                f"{free / 2**30:.2f} GiB are free",
                fix="free space, choose another --output/--workdir, or pass --ignore-disk")


def _temp_dir(output: Path) -> Path:
    tmp = output.with_name(f".{output.name}.building")
    try:
        if tmp.exists():
            shutil.rmtree(tmp)
        tmp.mkdir()
    except OSError as e:
        raise OutputError(f"output location {output.parent} is not writable: {e.strerror}",
                          fix="choose a writable --output") from None
    return tmp


@dataclass(frozen=True)
class BuildOptions:
    """How to run a build (what to build is the plan)."""

    force: bool = False  # replace an output dir that holds something else
    rerun_layers: frozenset[int] = frozenset()  # recompute even if checkpointed
    device: str = "cpu"
    progress: bool = True
    ignore_disk: bool = False


@dataclass
class Calibrated:
    """A build's calibration state, once its tokens are known."""

    params: CalibrateParams
    ids: np.ndarray  # [samples, seq_len] token ids
    token_sha: str
    runner: LayerRunner
    acts: ActivationStream


class Builder:
    """One build: calibration state and the computation of each unit."""

    def __init__(self, plan: Plan, source: Source, wd: WorkDir, *, device: str = "cpu",
                 log=print, progress: bool = True, events=None, dist: Dist | None = None):
        self.dist = dist or Dist(device=device)
        lead = self.dist.lead
        self.plan, self.source = plan, source
        self.wd = wd if self.dist.world == 1 else RankWorkDir(wd, self.dist)
        self.device, self.log, self.progress = device, log, progress and lead
        self.events = (events if lead else None) or (lambda event, **fields: None)
        self.fam = plan.family
        self.write = plan.recipe.write
        self.dtype = DTYPES[self.write.dtype]
        self.calib = plan.recipe.calibrate
        self.hessian_units = fp.hessian_units(plan)
        self.r1 = rotate.rotation(plan.rotate.seed, plan.hidden, 0) \
            if plan.rotate is not None and plan.r1_on else None
        cache = HashCache(wd.path.parent / "hash-cache.json" if lead else None)
        self.source_hashes = source.file_hashes(cache)  # multi-GB shards: hashed once
        cache.save()
        self.src_fp = fingerprint(self.source_hashes)
        self.fold_fp = fp.fold_fingerprint(plan, self.write.dtype)
        self.cal: Calibrated | None = None
        self.act_fp: dict[int, str] = {}
        self._pending_y: torch.Tensor | None = None  # layer output from the Hessian pass

    def unit_fp(self, unit: Unit) -> str:
        upstream = self.act_fp[unit.index - 1] if unit.name in self.hessian_units else None
        return fp.unit_fingerprint(self.plan, unit, self.src_fp, self.fold_fp, upstream)

    # ---- calibration ----------------------------------------------------------
    def start_calibration(self) -> None:
        p = self.calib
        assert p is not None
        on_gpu = p.source.self_generated and torch.device(self.device).type == "cuda"
        # tokens sampled on a GPU are other tokens: their own cache entry. GPU and
        # layer-streamed samples cached before the KV-cache keyword fix
        # (stages/hf_cache.py) may be context-free text: a new key resamples them
        salt = (["sampled-on-cuda"] if on_gpu else []) + \
            (["kv-keyword-fixed"] if on_gpu or p.stream else [])
        cfp = fingerprint("calib-v1", self.src_fp, p.identity(), *salt)
        ids = None
        if self.dist.lead:  # the other ranks take rank 0's tokens
            f = self.wd.calib_file(cfp)
            if f.is_file():
                ids = np.load(f)
            else:
                where = self.plan.recipe.line_of("stages")
                ids = calibration_ids(p, self.source.path, where, log=self.log,
                                      device=self.device if on_gpu else "cpu")
                self.wd.save_calib(cfp, ids)
        ids = self.dist.share(ids)
        token_sha = token_hash(ids)
        runner = LayerRunner(self.plan.config, self.fam, self.device)
        self.act_fp = fp.activation_fingerprints(self.plan, self.src_fp, self.fold_fp,
                                                 token_sha, self.hessian_units)
        acts = ActivationStream(self.wd, self.dist, runner, len(ids), self.act_fp,
                                self._embeddings, self._layer_for_forward, p.keep)
        self.cal = Calibrated(p, ids, token_sha, runner, acts)

    def _cal(self) -> Calibrated:
        assert self.cal is not None, "calibration has not started"
        return self.cal

    def _embeddings(self) -> torch.Tensor:
        w = fold_unit(self.plan, self.source, self.plan.units[0], self.r1)
        cal = self._cal()
        return cal.runner.embed(w[f"{self.fam.embed}.weight"], torch.from_numpy(cal.ids))

    def _layer_for_forward(self, i: int):
        unit = self.plan.units[i + 1]
        hf = fold_unit(self.plan, self.source, unit, self.r1)
        if self._cal().params.hessians == "propagate":
            cached = self.wd.load_unit(unit.name, self.unit_fp(unit))
            assert cached is not None  # computed before any later layer
            hf.update(self._dequantized_hf(cached[0]))
        return self._materialise(i, hf)

    def _materialise(self, i: int, hf: dict[str, torch.Tensor]):
        """Layer i as a transformers module from HF-named (checkpoint) tensors."""
        pre = f"{self.fam.layer_prefix}{i}."
        return self._cal().runner.layer(i, {k[len(pre):]: v for k, v in hf.items()})

    def _dequantized_hf(self, art: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        deq = {}
        for name, t in art.items():
            module = name[: -len(".weight")]
            if name.endswith(".weight") and f"{module}.scales" in art:
                deq[name] = dequantize_module(t, art[f"{module}.scales"],
                                              art.get(f"{module}.biases"),
                                              module_entry(self.plan.specs[module]))
            elif not name.endswith((".scales", ".biases")):
                deq[name] = t.float()
        return to_hf(self.fam, deq)

    def calibration(self) -> dict | None:
        """The metadata's calibration record (None: no calibration ran)."""
        if self.cal is None:
            return None
        c = self.cal.params
        kind = ("files" if c.source.files else "dataset" if c.source.dataset
                else "self_generated")
        return {**c.model_dump(), "source": kind, "source_spec": c.source.model_dump(),
                "token_sha256": self.cal.token_sha}

    # ---- computing one unit -----------------------------------------------------
    def compute(self, unit: Unit, bar) -> tuple[dict[str, torch.Tensor], dict]:
        t0 = time.perf_counter()
        hf = fold_unit(self.plan, self.source, unit, self.r1)
        hessians: dict[str, torch.Tensor | None] = {}
        if unit.name in self.hessian_units and unit.kind == "layer":
            hessians = self._layer_hessians(unit, hf, bar)
        elif unit.name in self.hessian_units and unit.kind == "head":
            cal = self._cal()
            x = cal.acts.before(self.plan.num_layers)
            hessians = {f"{self.fam.lm_head}.weight": head_hessian(
                x, hf[f"{self.fam.final_norm}.weight"].to(x.device),
                float(self.plan.config.get("rms_norm_eps", 1e-6)),
                self.fam.zero_centred_norms, self.dist, self.dist.rounds(len(cal.ids)))}
        bar.set_postfix_str(f"{unit.name}: quantize")
        art = to_artifact(self.fam, hf)
        done = self._quantize_all(art, hessians)
        out: dict[str, torch.Tensor] = {}
        modules: dict[str, dict] = {}
        for name, t in art.items():
            module = name[: -len(".weight")]
            if module not in done or not name.endswith(".weight"):
                out[name] = t.to(self.dtype)
                continue
            tensors, record = done[module]
            if record.get("guard_events"):
                self._dump_failing(module, self._hessians_for(module, t, hessians),
                                   record["guard_events"])
            modules[module] = record
            out.update(tensors)
        if unit.kind == "layer" and self.cal is not None:
            self._advance(unit, hf, out)
        return out, {"modules": modules, "seconds": round(time.perf_counter() - t0, 3)}

    def _quantize_all(self, art: dict[str, torch.Tensor], hessians: dict) -> dict:
        """module -> (tensors, record) for every quantized tensor of a unit; with
        several ranks each quantizes its share (by estimated cost) and all get all."""
        jobs = {}
        for name, t in art.items():
            module = name[: -len(".weight")]
            spec = self.plan.specs.get(module) if name.endswith(".weight") else None
            if spec is not None:
                jobs[module] = (name, t, spec)
        guard = self.plan.quantize.guard if self.plan.quantize else None
        owner = self.dist.assign([(m, quant_cost(t, spec)) for m, (_, t, spec) in jobs.items()])
        # on a GPU the host half of each tensor (copies, packing, hashes) runs in
        # one helper thread while the next tensor quantizes; results in job order
        pool = ThreadPoolExecutor(1) if overlap_host_work(self.device) else None
        pending: dict = {}
        try:
            for module, (name, t, spec) in jobs.items():
                if owner[module] != self.dist.rank:
                    continue
                hs = self._hessians_for(module, t, hessians)
                finish = encode_tensor(name, t.to(self.device), spec, self.dtype, hs, guard)
                pending[module] = pool.submit(finish) if pool else finish()
            done = {m: (f.result() if pool else f) for m, f in pending.items()}
        finally:
            if pool:
                pool.shutdown(wait=True, cancel_futures=True)
        if self.dist.world > 1:
            mine = {m: ({k: v.cpu() for k, v in ts.items()}, rec) for m, (ts, rec) in done.items()}
            done = {}
            for part in self.dist.all_objects(mine):
                done.update(part)
        return done

    def _layer_hessians(self, unit: Unit, hf: dict, bar) -> dict[str, torch.Tensor | None]:
        i, cal = unit.index, self._cal()
        x = cal.acts.before(i)
        pre = f"{self.fam.layer_prefix}{i}."
        layer = self._materialise(i, hf)
        bar.set_postfix_str(f"{unit.name}: hessians")
        cap = HessianCapture(layer, cal.params.seq_len, reducer=self.dist)
        ys = []
        for j in range(self.dist.rounds(len(cal.ids))):  # one sample per rank per round
            if j < x.shape[0]:
                ys.append(cal.runner.run(i, layer, x[j:j + 1], on_sample=cap.start_batch))
            cap.end_sample()
        cap.close()
        y = torch.cat(ys) if ys else x[:0]
        self._pending_y = y  # original-mode output, reused by _advance
        return {f"{pre}{name}": cap.for_module(name) for name in cap.alias}

    def _hessians_for(self, module: str, t: torch.Tensor, hessians: dict
                      ) -> list[torch.Tensor | None] | None:
        if not hessians:
            return None
        hf_name = module[len(self.fam.artifact_prefix):] if self.fam.artifact_prefix else module
        if t.ndim == 2:
            return [hessians.get(hf_name + ".weight", hessians.get(hf_name))]
        base, proj = hf_name.rsplit(".switch_mlp.", 1)
        return [hessians.get(f"{base}.experts.{e}.{proj}") for e in range(t.shape[0])]

    def _dump_failing(self, module: str, hs, events) -> None:
        if hs and any(e["event"] in ("cholesky_failed", "scale_diverged") for e in events):
            tensors = {f"H{i}": h for i, h in enumerate(hs) if h is not None}
            if tensors:
                self.wd.save_debug(module.replace("/", "_"), tensors, {"events": events})

    def _advance(self, unit: Unit, hf: dict, quantized: dict) -> None:
        """Activations after this layer: the unquantized layer's (original) or the
        quantized layer's (propagate)."""
        i, cal = unit.index, self._cal()
        propagate = cal.params.hessians == "propagate"
        y, self._pending_y = self._pending_y, None
        if propagate or y is None:
            x = cal.acts.before(i)
            state = dict(hf)
            if propagate:
                state.update(self._dequantized_hf(quantized))
            y = cal.runner.run(i, self._materialise(i, state), x)
        cal.acts.advance(i, y)

    # ---- the whole build ----------------------------------------------------------
    def run(self, rerun: frozenset[int] | set[int]) -> tuple[dict[str, str], list[str], dict]:
        plan = self.plan
        if self.calib is not None and self.hessian_units:
            self.start_calibration()
        forced = set()
        for u in plan.units:
            if u.kind == "layer" and u.index in rerun:
                forced.add(u.name)
                if self.calib is not None and self.calib.hessians == "propagate":
                    forced.update(v.name for v in plan.units if v.index > u.index
                                  and v.kind in ("layer", "head"))
        fps, computed, stats = {}, [], {}
        bar = tqdm(plan.units, desc=plan.recipe.name, unit="unit", disable=not self.progress,
                   dynamic_ncols=True)
        n_layers = plan.num_layers
        for unit in bar:
            where = (f"layer {unit.index + 1}/{n_layers}" if unit.kind == "layer" else unit.name)
            bar.set_postfix_str(where)
            fp_ = self.unit_fp(unit)
            fps[unit.name] = fp_
            cached = None if unit.name in forced else self.wd.load_unit(unit.name, fp_)
            self.events("unit_start", unit=unit.name, cached=cached is not None)
            if cached is None:
                tensors, st = self.compute(unit, bar)
                self.wd.save_unit(unit.name, fp_, tensors, st)
                computed.append(unit.name)
                stats[unit.name] = st
                del tensors
                release_memory()
            else:
                stats[unit.name] = cached[1]
            mods = stats[unit.name]["modules"]
            errs = [m["proxy_rel_error"] for m in mods.values() if "proxy_rel_error" in m]
            self.events("unit_end", unit=unit.name, cached=cached is not None,
                        seconds=stats[unit.name].get("seconds"),
                        mean_proxy_rel_error=sum(errs) / len(errs) if errs else None,
                        guard_events=[e for m in mods.values()
                                      for e in m.get("guard_events", [])])
        return fps, computed, stats


def quant_cost(t: torch.Tensor, spec) -> float:
    """Relative work of quantizing one tensor, to spread a layer over ranks."""
    fmt = FORMATS.get(spec.format)
    return fmt.encode_cost(spec, tuple(t.shape)) if fmt else float(t.numel())


def disk_full(e: BaseException) -> bool:
    """ENOSPC/EDQUOT, also when a writer (safetensors' Rust one) wraps it."""
    if isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT):
        return True
    text = str(e)
    return any(m in text for m in ("No space left on device", "os error 28",
                                   "Disk quota exceeded", "os error 122"))


def release_memory() -> None:
    """Hand freed heap back to the OS between units (glibc keeps it otherwise), so
    resident memory tracks the one unit in flight."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def build(plan: Plan, source: Source, output: Path, options: BuildOptions = BuildOptions(), *,
          gguf: Path | None = None, workdir: Path | None = None, log=print, events=None,
          dist: Dist | None = None) -> BuildResult:
    t0 = time.perf_counter()
    recipe = plan.recipe
    output = Path(output)
    dist = dist or Dist(device=options.device)
    if dist.lead:
        check_output(output, recipe.name, options.force)
        if not options.ignore_disk:
            check_disk(plan, output, Path(workdir or recipe.workdir))
    wd = WorkDir(Path(workdir or recipe.workdir), recipe.name)
    if dist.lead:
        wd.lock()
    try:
        builder = Builder(plan, source, wd, device=dist.device, log=log,
                          progress=options.progress, events=events, dist=dist)
        builder.events("build_start", recipe=recipe.name, units=len(plan.units),
                       ranks=dist.world)
        fps, computed, stats = builder.run(options.rerun_layers)
        if not dist.lead:  # rank 0 assembles the artifact from its checkpoints
            return BuildResult(output=output, seconds=time.perf_counter() - t0, shards=[],
                               modules={}, computed=computed)
        device = "cuda" if str(options.device).startswith("cuda") else "cpu"
        shards, modules, quality = assemble(plan, source, wd, fps, output, gguf,
                                            builder.calibration(), builder.source_hashes,
                                            device)
        builder.events("build_end", recipe=recipe.name, computed=len(computed),
                       seconds=round(time.perf_counter() - t0, 3))
        write_report(wd.path, recipe.name, time.perf_counter() - t0, computed, stats, modules,
                     device)
    except Exception as e:
        if disk_full(e):
            raise OutputError(f"the disk filled up while writing ({output} or {wd.path})",
                              fix="free space and run the same command again: finished "
                              "units are checkpointed and the output was not touched") from None
        raise
    finally:
        wd.unlock()
    raise_if_failed(quality, output)  # written, the failure recorded: exit 3
    return BuildResult(output=output, seconds=time.perf_counter() - t0, shards=shards,
                       modules=modules, computed=computed, quality=quality)


def assemble(plan: Plan, source: Source, wd: WorkDir, fps: dict[str, str], output: Path,
             gguf: Path | None, calibration: dict | None, source_hashes: dict, device: str
             ) -> tuple[list[str], dict, dict | None]:
    """Checkpoints -> shards + config + metadata in a temp dir, evaluated when the
    recipe has an `evaluate` stage, renamed into place. -> (shards, module records,
    the quality record or None). `calibration`: the metadata's calibration record
    (None without calibration); `device`: where the card's numbers were measured."""
    write = plan.recipe.write
    tmp = _temp_dir(output)
    try:
        writer = ShardWriter(tmp, write.shard_bytes)
        modules: dict = {}
        events: list = []
        for unit in plan.units:
            loaded = wd.load_unit(unit.name, fps[unit.name])
            assert loaded is not None  # every unit was checkpointed by Builder.run
            tensors, st = loaded
            if unit.kind == "mtp":  # the companion: its own directory, HF layout
                (tmp / "mtp").mkdir()
                companion = ShardWriter(tmp / "mtp", write.shard_bytes)
                for k, v in tensors.items():
                    companion.add(k, v)
                companion.finish()
                continue
            for k, v in tensors.items():
                writer.add(k, v)
            release_memory()
            for m, rec in st["modules"].items():
                modules[m] = rec
                events += rec.get("guard_events", [])
            del tensors
        shards = writer.finish()
        qp = plan.quantize
        quant = quantization_entry(plan.specs, qp.default) if qp else None
        cfg = artifact_config(plan.config, model_type=plan.family.artifact_model_type,
                              untied=plan.tied and plan.has("untie"), quantization=quant,
                              dtype=write.dtype)
        write_json(tmp / "config.json", cfg)
        for f in source.passthrough_files():
            shutil.copyfile(f, tmp / f.name)
        gguf_info = {"file": gguf.name, "sha256": sha256_file(gguf)} if gguf else None
        meta = build_metadata(plan, source_hashes=source_hashes, gguf=gguf_info,
                              modules=modules, calibration=calibration, guard_events=events)
        write_json(tmp / "optiq_metadata.json", meta)
        quality = None
        if plan.recipe.evaluate is not None:
            quality = run_evaluation(plan.recipe.evaluate, tmp, source.path, wd.path.parent,
                                     device, plan.recipe.line_of("stages"))
            meta["quality"] = quality
            write_json(tmp / "optiq_metadata.json", meta)
        bpw = inspect(tmp)["bits_per_weight"]
        (tmp / "README.md").write_text(render_card(plan, meta, bpw, device))
        for f in tmp.rglob("*"):
            f.chmod(0o755 if f.is_dir() else 0o644)
        replace_dir(tmp, output)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return shards, modules, quality
