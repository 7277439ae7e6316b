"""YAML recipe -> typed, frozen Recipe. Every error names file:line and the fix."""

from __future__ import annotations

import difflib
import hashlib
import re
from pathlib import Path
from typing import Any, Literal, cast, get_args, get_origin

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_serializer,
    model_validator,
)

from .errors import RecipeError
from .formats import mlx_affine
from .formats.mx import MX_FORMATS
from .io.paths import checked, syntax_problem


class Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SourceSpec(Frozen):
    path: str | None = Field(None, description="a Hugging Face model directory or a .gguf file")
    hub: str | None = Field(None, description="'org/name' or 'org/name@revision', read "
                            "from the local Hugging Face cache only")
    package: str | None = Field(None, description="a Python package that ships the weights")
    file: str | None = Field(None, description="file inside `package` (glob allowed)")
    trust_remote_code: bool = Field(False, description="allow a source whose config names "
                                    "custom code (auto_map); tq-build never runs it")


class RotateParams(Frozen):
    r1: Literal["random_hadamard", "off"] = "random_hadamard"
    r2: Literal["random_hadamard", "off"] = "random_hadamard"
    seed: int = Field(42, ge=0, lt=2**32)

    @field_validator("r1", "r2", mode="before")
    @classmethod
    def _yaml_off(cls, v: Any) -> Any:
        return "off" if v is False else v  # YAML 1.1 reads a bare `off` as false


Bits = Literal[1, 2, 3, 4, 5, 6, 8]
AFFINE_BITS = mlx_affine.BITS
TRELLIS_BITS = (1, 2, 3, 4)
GroupSize = Literal[32, 64, 128]


Format = Literal["affine", "none", "mxfp4", "nvfp4", "mxfp8", "trellis"]
Method = Literal["rtn", "gptq", "ldlq"]


class TrellisParams(Frozen):
    """QTIP bitshift trellis (DESIGN §5): L-bit state, T-weight tail-biting blocks."""

    L: Literal[12, 16] = 12
    T: int = Field(256, ge=8, le=4096, description="weights per tail-biting block")
    code: Literal["1mad", "3inst", "mul1", "pair"] = Field(
        "1mad", description="the computed code; mul1 (exllamav3's hash, lower MSE) needs "
        "trellis format version 2 to load; pair (two weights a state from a 512-entry "
        "table: needs format version 3, k <= L/4; decoded by CUDA kernels on sm_90, "
        "else expanded)")
    axis: Literal["auto", 0, 1] = Field(
        "auto", description="coded axis; auto = the rotated one (0 for residual writers "
        "such as down_proj, 1 otherwise)")
    interleave: bool = Field(False, description="store block pairs interleaved")
    ldlq_group: int = Field(128, ge=1, le=65536, description="input columns per LDLQ "
                            "step when coding along axis 0 (the error is fed back after "
                            "each step: smaller is better and slower; 16 measured best)")
    scale_alpha: float = Field(1.0, ge=0.5, le=2.0, description="every sequence scale × "
                               "this before coding (the code's unit variance vs the "
                               "sequence's; 1.10 measured best with LDLQ)")
    refit: bool = Field(False, description="refit the scales after coding to the "
                        "Hessian-weighted least squares (kept where the proxy drops)")

    @model_serializer(mode="wrap")
    def _dump(self, handler):
        """The later fields appear in dumps (fingerprints, provenance) only when
        set, so recipes that leave them keep their keys and artifacts' bytes."""
        d = handler(self)
        for name in ("scale_alpha", "refit"):
            if d.get(name) == type(self).model_fields[name].default:
                d.pop(name)
        return d


class KMap(Frozen):
    """Per-tensor k (trellis) or bits (affine) allocated to a budget from a
    sensitivity table."""

    kmap: str | None = Field(None, description="JSON {tensor: {k: loss}}; relative to "
                             "the recipe. Without it every tensor gets floor(budget)")
    budget: float = Field(ge=1, le=9, description="average k over the matched tensors "
                          "(affine: bits per weight including the group scale and bias)")
    choices: tuple[int, ...] = (2, 3, 4)


class QuantSpec(Frozen):
    method: Method = Field("rtn", description="rtn | gptq (affine) | ldlq (trellis); rtn on "
                           "a trellis format is the plain Viterbi code")
    format: Format = "affine"
    bits: Bits | KMap = 4
    group_size: GroupSize = 64
    damp: float = Field(0.01, gt=0, le=10, description="GPTQ/LDLQ damping, × mean diag(H)")
    act_order: bool = False
    block_size: int = Field(128, ge=1, le=4096)
    trellis: TrellisParams = TrellisParams()

    @model_validator(mode="after")
    def _consistent(self):
        if self.format == "trellis":
            if self.method == "gptq":
                raise ValueError("method gptq is affine; the trellis counterpart is `ldlq`")
            if isinstance(self.bits, int) and self.bits not in TRELLIS_BITS:
                raise ValueError(f"trellis bits (k) must be one of {TRELLIS_BITS}, "
                                 f"got {self.bits}")
            tp = self.trellis
            top = self.bits if isinstance(self.bits, int) else max(self.bits.choices)
            if tp.code == "pair" and (4 * top > tp.L or tp.T % 2):
                raise ValueError(f"the pair code shifts 2k bits a step: it needs k <= L/4 "
                                 f"(k = {top}, L = {tp.L}) and an even T (T = {tp.T}); "
                                 "use L: 16 or smaller k")
        else:
            if self.method == "ldlq":
                raise ValueError("method ldlq needs `format: trellis` (use gptq for affine)")
            if isinstance(self.bits, KMap):
                if self.format != "affine" or not set(self.bits.choices) <= set(AFFINE_BITS):
                    raise ValueError("a {kmap, budget} allocation needs `format: trellis` "
                                     f"(k in {TRELLIS_BITS}) or `format: affine` (bits in "
                                     f"{AFFINE_BITS}; set `choices`)")
            elif self.format == "affine" and self.bits not in AFFINE_BITS:
                raise ValueError(f"affine bits must be one of {AFFINE_BITS}, got {self.bits}")
        return self

    @property
    def uses_hessian(self) -> bool:
        return self.method in ("gptq", "ldlq")

    @property
    def mx(self) -> bool:
        return self.format in MX_FORMATS

    @property
    def quantized(self) -> bool:
        return self.format != "none"

    @property
    def k(self) -> int:
        """bits (trellis: k) once allocated: a {kmap, budget} is resolved by the plan."""
        if isinstance(self.bits, KMap):
            raise ValueError("bits {kmap, budget} used before the plan allocated them")
        return self.bits

    @property
    def bits_(self) -> int:
        return MX_FORMATS[self.format][0] if self.mx else self.k

    @property
    def group_(self) -> int:
        return MX_FORMATS[self.format][1] if self.mx else self.group_size


class QuantRule(Frozen):
    match: str
    method: Method | None = None
    format: Format | None = None
    bits: Bits | KMap | None = None
    group_size: GroupSize | None = None
    damp: float | None = Field(None, gt=0, le=10)
    act_order: bool | None = None
    block_size: int | None = Field(None, ge=1, le=4096)
    trellis: TrellisParams | None = None

    @field_validator("match")
    @classmethod
    def _compiles(cls, v: str) -> str:
        try:
            re.compile(v)
        except re.error as e:
            raise ValueError(f"`match` is not a valid regular expression ({e})") from e
        return v

    def apply(self, base: QuantSpec) -> QuantSpec:
        upd = {k: getattr(self, k) for k in type(self).model_fields
               if k != "match" and getattr(self, k) is not None}
        return QuantSpec(**{**dict(base), **upd})  # validated as a whole


class GuardParams(Frozen):
    """GPTQ/LDLQ divergence guard (seed W5c): GPTQ group scales above
    `scale_ratio` × the RTN scale ceiling (LDLQ: feedback targets above
    `scale_ratio` × the original peak), or a failed Cholesky, escalate damping
    ×10 up to `max_damp`, then fall back to RTN (LDLQ: the plain trellis)."""

    scale_ratio: float = Field(4.0, gt=1)
    max_damp: float = Field(10.0, gt=0)
    compare_plain: bool = Field(False, description="also run the plain trellis code and "
                                "keep it where its Hessian proxy loss is lower than LDLQ's")


class QuantizeParams(Frozen):
    default: QuantSpec = QuantSpec()
    rules: tuple[QuantRule, ...] = ()
    guard: GuardParams = GuardParams()

    @model_validator(mode="after")
    def _rules_apply(self):
        for i, rule in enumerate(self.rules):
            try:
                rule.apply(self.default)
            except ValidationError as e:
                msg = "; ".join(err["msg"].removeprefix("Value error, ") for err in e.errors())
                raise ValueError(f"rule {i} (match {rule.match!r}): {msg}") from None
        return self

    @property
    def needs_hessians(self) -> bool:
        return bool(self.hessian_methods)

    @property
    def hessian_methods(self) -> list[str]:
        """The Hessian-based methods the quantize stage uses (gptq, ldlq)."""
        found = [s.method for s in (self.default, *(r.apply(self.default) for r in self.rules))
                 if s.uses_hessian]
        return sorted(set(found))

    def spec_for(self, module: str) -> QuantSpec:
        """First matching rule wins (re.search on the artifact module path)."""
        for rule in self.rules:
            if re.search(rule.match, module):
                return rule.apply(self.default)
        return self.default


class NoParams(Frozen):
    pass


class CalibSource(Frozen):
    files: str | tuple[str, ...] | None = Field(None, description="text / JSONL globs")
    dataset: str | None = Field(None, description="a Hugging Face dataset in the local cache")
    split: str = "train"
    column: str = "text"
    self_generated: bool = False

    @model_validator(mode="after")
    def _one_kind(self):
        kinds = [k for k, v in (("files", self.files), ("dataset", self.dataset),
                                ("self_generated", self.self_generated)) if v]
        if len(kinds) != 1:
            raise ValueError("give exactly one of `files`, `dataset` or `self_generated: true`"
                             f" (got {kinds or 'none'})")
        return self


class CalibrateParams(Frozen):
    source: CalibSource = CalibSource(self_generated=True)
    samples: int = Field(128, ge=1, le=1_000_000, description="calibration sequences")
    seq_len: int = Field(128, ge=8, le=1_000_000, description="tokens per sequence")
    seed: int = Field(0, ge=0, description="window choice (files) / sampling (self_generated)")
    hessians: Literal["original", "propagate"] = Field(
        "original", description="original: every layer sees the unquantized model's "
        "activations; propagate: the quantized layer's output feeds the next")
    version: Literal[1, 2] = Field(
        2, description="self_generated sampling rule: 1 = batches of 16, torch.multinomial "
        "(the first release's tokens); 2 = the whole batch with one KV cache, inverse-CDF "
        "draws (one uniform per sequence and step)")
    batch_size: int | None = Field(
        None, ge=1, description="sequences sampled at once with one KV cache (self_generated; "
        "default: 16 for version 1, all of them for 2); part of the calibration's identity")
    stream: bool = Field(False, description="self_generated: sample one decoder layer at a "
                         "time (peak memory one layer + the KV cache, not the model)")
    temperature: float = Field(1.0, gt=0, description="self_generated sampling temperature")
    keep: Literal["last", "all"] = Field(
        "last", description="activations kept in the work dir: only those entering the "
        "next layer (older ones are replayed from the embeddings if ever needed) or all")

    @property
    def batch(self) -> int:
        return self.batch_size or (16 if self.version == 1 else self.samples)

    def identity(self) -> dict:
        """What decides the tokens (the calibration cache key). Version 1 keeps the
        first release's key, so its cached tokens and artifacts stay valid."""
        d = self.model_dump(exclude={"keep", "hessians"})
        d["batch_size"] = self.batch
        if self.version == 1:
            d.pop("version")
        if not self.stream:
            d.pop("stream")
        return d


class WriteParams(Frozen):
    shard_size: str = "2GB"
    dtype: Literal["bfloat16", "float16", "float32"] = "bfloat16"

    @field_validator("shard_size")
    @classmethod
    def _size(cls, v: str) -> str:
        parse_size(v)
        return v

    @property
    def shard_bytes(self) -> int:
        return parse_size(self.shard_size)


def parse_size(v: str | int) -> int:
    if isinstance(v, int):
        return v
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]?B)\s*", str(v), re.I)
    if not m:
        raise ValueError(f"size {v!r} is not like '2GB' or '500MB'")
    mult = {"B": 1, "KB": 2**10, "MB": 2**20, "GB": 2**30, "TB": 2**40}[m.group(2).upper()]
    return int(float(m.group(1)) * mult)


class GateParams(Frozen):
    """Quality gates: a build whose evaluation fails one exits 3 and records it."""

    max_kl: float | None = Field(None, gt=0, description="mean KL(source ‖ artifact), "
                                 "averaged over the texts")
    max_ppl_ratio: float | None = Field(None, gt=0, description="artifact / source perplexity, "
                                        "averaged over the texts")
    eos_probe_failures: int | None = Field(None, ge=0, description="most probe prompts "
                                           "answered with an immediate EOS or nothing")


class EvaluateParams(Frozen):
    texts: tuple[str, ...] = Field((), description="held-out text files (default: the "
                                   "bundled data/eval/python-stdlib-docstrings.txt)")
    tokens: int = Field(4096, ge=16, description="tokens of each text")
    window: int = Field(512, ge=8, description="evaluation window (tokens)")
    probe: bool = Field(True, description="run the EOS probe (needs a tokenizer with a chat "
                        "template; loads the whole artifact)")
    stream: bool = Field(False, description="teacher and artifact run one layer at a time "
                         "(peak memory one layer, for models larger than the machine)")
    gate: GateParams = GateParams()


# Stage name -> params model, in the only order stages may run.
STAGES: dict[str, type[Frozen]] = {
    "untie": NoParams,
    "norm_fold": NoParams,
    "rotate": RotateParams,
    "calibrate": CalibrateParams,
    "quantize": QuantizeParams,
    "write": WriteParams,
    "evaluate": EvaluateParams,
}
ORDER = list(STAGES)
WHY_ORDER = {
    "rotate": "R1 commutes only with gain-free norms, so norm_fold must run before rotate; "
    "rotations fold into full-precision weights, so they come before quantize",
    "norm_fold": "γ folds into full-precision weights: untie, then norm_fold, then rotate",
    "untie": "untie must come first: later folds transform lm_head but not embed_tokens",
    "calibrate": "Hessians are captured in the folded (rotated) basis: calibrate comes after "
    "every fold and before quantize",
    "quantize": "quantize works on the folded weights, after every fold",
    "write": "write comes after every stage that changes weights",
    "evaluate": "evaluate reads the written artifact",
}


class Stage(Frozen):
    name: str
    params: Any
    line: int


class CardParams(Frozen):
    """What the artifact's README.md model card says about its origin."""

    base_model: str | None = Field(None, description="Hub id of the source model "
                                   "(default: the `hub:` source, if any)")
    license: str | None = None
    tags: tuple[str, ...] = ()


class Recipe(Frozen):
    name: str
    source: SourceSpec
    output: str
    workdir: str = ".tq-work"
    card: CardParams = CardParams()
    stages: tuple[Stage, ...]
    # seed findings accepted knowingly (pipeline/seed_findings.py)
    allow: tuple[str, ...] = ()
    file: str
    text: str
    lines: dict[str, int]
    overrides: tuple[str, ...] = ()

    @property
    def hash(self) -> str:
        """sha256 of the recipe text and the `--set` overrides applied to it."""
        extra = "".join(f"\n#--set {o}" for o in self.overrides)
        return hashlib.sha256((self.text + extra).encode()).hexdigest()

    def stage(self, name: str) -> Any | None:
        return next((s.params for s in self.stages if s.name == name), None)

    # the stages' parameters, typed (None: the recipe does not have that stage)
    @property
    def rotate(self) -> RotateParams | None:
        return self.stage("rotate")

    @property
    def calibrate(self) -> CalibrateParams | None:
        return self.stage("calibrate")

    @property
    def quantize(self) -> QuantizeParams | None:
        return self.stage("quantize")

    @property
    def evaluate(self) -> EvaluateParams | None:
        return self.stage("evaluate")

    @property
    def write(self) -> WriteParams:
        """Always present: the loader appends a default `write` when it is missing."""
        w = self.stage("write")
        assert isinstance(w, WriteParams)
        return w

    def line_of(self, *path: str | int) -> str:
        """file:line of the deepest recorded node on `path`."""
        return line_lookup(self.file, self.lines, path)


def line_lookup(file: str, lines: dict[str, int], path: tuple) -> str:
    """file:line of the deepest node on `path` (keys joined by '/') that has a line."""
    for n in range(len(path), -1, -1):
        key = "/".join(map(str, path[:n]))
        if key in lines:
            return f"{file}:{lines[key]}"
    return file


TOP_KEYS = {"name", "source", "output", "workdir", "stages", "calibration", "card", "allow"}


def _index_lines(node: yaml.Node, path: str, out: dict[str, int]) -> None:
    """Record the line of every key and list item, keyed by its '/'-joined path."""
    if isinstance(node, yaml.MappingNode):
        items = [(str(k.value), k, v) for k, v in node.value]
    elif isinstance(node, yaml.SequenceNode):
        items = [(str(i), v, v) for i, v in enumerate(node.value)]
    else:
        return
    for key, mark_node, child in items:
        sub = f"{path}/{key}" if path else key
        out[sub] = mark_node.start_mark.line + 1
        _index_lines(child, sub, out)


def _suggest(key: str, allowed: list[str]) -> str:
    close = difflib.get_close_matches(key, allowed, n=1)
    hint = f"did you mean {close[0]!r}? " if close else ""
    return f"{hint}allowed keys: {', '.join(allowed)}"


def _fail(where: str, msg: str, fix: str) -> RecipeError:
    return RecipeError(msg, where=where, fix=fix)


def _short(v: Any) -> str:
    r = repr(v)
    return r if len(r) <= 80 else f"{r[:60]}… ({len(r)} characters)"


# keys whose string values name files or directories, wherever they appear
PATH_KEYS = ("path", "file", "files", "kmap", "output", "workdir")


def _check_paths(node: Any, at: tuple, where_of) -> None:
    """Every path-valued string in the recipe is usable as a path (length, NUL and
    control characters); whether it exists is checked where it is opened."""

    items = node.items() if isinstance(node, dict) else \
        enumerate(node) if isinstance(node, list) else ()
    for k, v in items:
        here = (*at, k)
        is_path = k in PATH_KEYS or here == ("source",)  # `source: DIR` is `source.path`
        if is_path and isinstance(v, str | list):
            for s in [v] if isinstance(v, str) else [x for x in v if isinstance(x, str)]:
                reason = syntax_problem(s)
                if reason:
                    raise _fail(where_of(*here), f"`{k}` {_short(s)} is not a usable path: "
                                f"{reason}", f"give `{k}` a real file or directory path")
        elif isinstance(v, dict | list):
            _check_paths(v, here, where_of)


def _validate(model: type[Frozen], data: Any, path: tuple, where_of) -> Frozen:
    """Validate `data` against `model`, turning the first error into a RecipeError."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise _fail(where_of(*path), f"{'.'.join(map(str, path)) or 'recipe'} must be a mapping",
                    f"write it as `key: value` pairs ({', '.join(model.model_fields)})")
    try:
        return model.model_validate(data)
    except ValidationError as e:
        err = e.errors()[0]
        loc = tuple(err["loc"])
        full = path + loc
        dotted = ".".join(map(str, full))
        if err["type"] == "extra_forbidden":
            allowed = list(_fields_at(model, loc[:-1]))
            scope = ".".join(map(str, path)) or "recipe"
            raise _fail(where_of(*full), f"unknown key {loc[-1]!r} in {scope}",
                        _suggest(str(loc[-1]), allowed)) from None
        if err["type"] == "missing":
            raise _fail(where_of(*path), f"missing required key {dotted!r}",
                        f"add `{loc[-1]}:` here") from None
        expected = _expected(model, loc)
        raise _fail(where_of(*full), f"{dotted}: {err['msg']} (got {_short(err.get('input'))})",
                    f"use {expected}" if expected else "correct the value") from None


def _fields_at(model: type[BaseModel], loc: tuple) -> dict:
    m: Any = model
    for part in loc:
        if isinstance(part, int):
            continue
        ann = m.model_fields[part].annotation
        args = getattr(ann, "__args__", ())
        m = next((a for a in (ann, *args) if isinstance(a, type) and issubclass(a, BaseModel)), m)
    return m.model_fields


def _expected(model: type[BaseModel], loc: tuple) -> str:
    try:
        fields = _fields_at(model, tuple(p for p in loc[:-1]))
        f = fields[loc[-1]]
    except (KeyError, AttributeError, TypeError, IndexError):
        return ""
    ann = f.annotation
    options = [a for a in get_args(ann) if a is not type(None)]
    if options and all(get_origin(a) is Literal for a in options):
        options = [v for a in options for v in get_args(a)]
    elif get_origin(ann) is Literal:
        options = list(get_args(ann))
    if options and not any(isinstance(o, type) for o in options):
        return "one of " + ", ".join(repr(o) for o in options)
    return f"a value of type {str(ann).replace('typing.', '')}"


def apply_override(data: Any, spec: str) -> None:
    """`a.b.c=VALUE` (VALUE parsed as YAML); a stage is addressed by its name,
    other list items by index: `stages.rotate.seed=7`,
    `stages.quantize.rules.0.bits=4`."""
    where = f"--set {spec}"
    key, eq, raw = spec.partition("=")
    if not eq or not key:
        raise RecipeError("an override is written KEY.PATH=VALUE", where=where,
                          fix="e.g. --set stages.rotate.seed=7")
    try:
        value = yaml.safe_load(raw)
    except yaml.YAMLError:
        raise RecipeError(f"value {raw!r} is not valid YAML", where=where,
                          fix="quote strings that contain YAML syntax") from None
    parts = key.split(".")
    node = data
    for i, part in enumerate(parts[:-1]):
        if isinstance(node, list) and part.isdigit():  # a list item by index (rules.1)
            if int(part) >= len(node):
                raise RecipeError(f"{'.'.join(parts[:i])} has {len(node)} items, no "
                                  f"item {part}", where=where, fix="index from 0")
            node = node[int(part)]
        elif isinstance(node, list):  # stages: find the stage by name
            hit = None
            for j, item in enumerate(node):
                name = item if isinstance(item, str) else next(iter(item), None) \
                    if isinstance(item, dict) else None
                if name == part:
                    if isinstance(item, str):
                        node[j] = item = {part: {}}
                    elif item[part] is None:
                        item[part] = {}
                    hit = item[part]
            if hit is None:
                raise RecipeError(f"no stage {part!r} in the recipe", where=where,
                                  fix="override a stage the recipe lists")
            node = hit
        elif isinstance(node, dict):
            node = node.setdefault(part, {})
            if node is None:
                raise RecipeError(f"{'.'.join(parts[:i + 1])} is empty", where=where,
                                  fix="set the whole mapping instead")
        else:
            raise RecipeError(f"{'.'.join(parts[:i])} is not a mapping", where=where,
                              fix="check the key path")
    if not isinstance(node, dict):
        raise RecipeError(f"{'.'.join(parts[:-1])} is not a mapping", where=where,
                          fix="check the key path")
    node[parts[-1]] = value


def load(path: str | Path, overrides: tuple[str, ...] | list[str] = ()) -> Recipe:
    path = checked(path, what="recipe file", where=None, kind="file",
                   fix="pass the path of a YAML recipe, e.g. recipes/smollm2-rot-rtn4.yaml")
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise RecipeError(f"recipe file {path} cannot be read ({e})",
                          fix="pass a readable UTF-8 YAML file") from None
    file = str(path)
    try:
        root = yaml.compose(text)
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"{file}:{mark.line + 1}" if mark else file
        raise RecipeError(f"not valid YAML: {getattr(e, 'problem', e)}", where=where,
                          fix="fix the YAML syntax (indentation, quotes, colons)") from None
    lines: dict[str, int] = {}
    if root is not None:
        lines[""] = root.start_mark.line + 1
        _index_lines(root, "", lines)

    def where_of(*p) -> str:
        return line_lookup(file, lines, p)

    if not isinstance(data, dict):
        raise RecipeError("a recipe must be a mapping with name, source, output and stages",
                          where=f"{file}:1", fix="see recipes/ for examples")
    for spec in overrides:
        apply_override(data, spec)
    for k in data:
        if k not in TOP_KEYS:
            raise _fail(where_of(k), f"unknown key {k!r} at the top level",
                        _suggest(str(k), sorted(TOP_KEYS)))
    for k in ("name", "source", "output", "stages"):
        if k not in data:
            raise _fail(f"{file}:1", f"missing required key {k!r}", f"add `{k}:` to the recipe")
    for k in ("name", "output", "workdir"):
        if k in data and not isinstance(data[k], str):
            raise _fail(where_of(k), f"{k} must be a string (got {_short(data[k])})",
                        f"quote the value of `{k}`")
    _check_paths(data, (), where_of)
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", data["name"]):
        raise _fail(where_of("name"), f"name {data['name']!r} is not a plain identifier",
                    "use letters, digits, '.', '_' and '-' (it names the work dir)")
    src = data["source"]
    if isinstance(src, str):
        src = {"path": src}
    source = cast(SourceSpec, _validate(SourceSpec, src, ("source",), where_of))
    if sum(x is not None for x in (source.path, source.package, source.hub)) != 1:
        raise _fail(where_of("source"), "source needs exactly one of `path`, `hub` or `package`",
                    "give `path: DIR_OR_GGUF`, `hub: org/name@revision` or `package: NAME` "
                    "with `file: GLOB`")
    stages = _parse_stages(data["stages"], where_of, data.get("calibration"))
    card = _validate(CardParams, data.get("card") or {}, ("card",), where_of)
    allow = data.get("allow") or []
    if not (isinstance(allow, list) and all(isinstance(a, str) for a in allow)):
        raise _fail(where_of("allow"), f"allow must be a list of finding names (got "
                    f"{_short(allow)})", "write e.g. `allow: [group-size-128]`")
    return Recipe(name=data["name"], source=source, output=data["output"],
                  workdir=data.get("workdir", ".tq-work"), card=card, stages=stages,
                  allow=tuple(allow), file=file,
                  text=text, lines=lines, overrides=tuple(overrides))


def _parse_stages(raw: Any, where_of, calibration: Any = None) -> tuple[Stage, ...]:
    if not isinstance(raw, list) or not raw:
        raise _fail(where_of("stages"), "stages must be a non-empty list",
                    f"list stages in order, e.g. {ORDER}")
    out: list[Stage] = []
    for i, item in enumerate(raw):
        if isinstance(item, str):
            name, params = item, None
        elif isinstance(item, dict) and len(item) == 1:
            name, params = next(iter(item.items()))
        else:
            raise _fail(where_of("stages", i), f"stages[{i}] must be a stage name or "
                        "a one-key mapping `name: {params}`", "e.g. `- rotate: {seed: 42}`")
        if name not in STAGES:
            raise _fail(where_of("stages", i), f"unknown stage {name!r}",
                        _suggest(str(name), ORDER).replace("allowed keys", "stages"))
        model = STAGES[name]
        path: tuple = ("stages", i, name)
        if name == "calibrate" and calibration is not None:
            if params is not None:
                raise _fail(where_of("calibration"), "calibration settings are given twice "
                            "(top-level `calibration:` and `calibrate:` stage params)",
                            "keep one of them")
            params, path = calibration, ("calibration",)
        p = _validate(model, params, path, where_of)
        out.append(Stage(name=name, params=p, line=int(where_of("stages", i).rsplit(":", 1)[1])))
    seen: dict[str, int] = {}
    for i, s in enumerate(out):
        if s.name in seen:
            raise _fail(where_of("stages", i), f"stage {s.name!r} appears twice",
                        "merge the two entries into one")
        seen[s.name] = i
    for i, s in enumerate(out):
        for later in out[i + 1:]:
            if ORDER.index(later.name) < ORDER.index(s.name):
                raise _fail(where_of("stages", out.index(later)),
                            f"stage {later.name!r} cannot run after {s.name!r}",
                            WHY_ORDER[later.name] + f"; the order is {' → '.join(ORDER)}")
    names = [s.name for s in out]
    q = next((s for s in out if s.name == "quantize"), None)
    if q is not None:
        for spec, path in [(q.params.default, ("default",))] + [
                (r.apply(q.params.default), ("rules", i)) for i, r in enumerate(q.params.rules)]:
            if spec.mx and spec.method == "gptq":
                raise _fail(where_of("stages", names.index("quantize"), "quantize", *path),
                            f"format {spec.format} is quantized by MLX itself (RTN); "
                            "GPTQ needs the affine format",
                            "use method: rtn with this format, or format: affine")
    if calibration is not None and "calibrate" not in names:
        raise _fail(where_of("calibration"), "`calibration:` is set but no stage uses it",
                    "add `- calibrate` before `- quantize`, or remove `calibration:`")
    q = next((s for s in out if s.name == "quantize"), None)
    if q is not None and q.params.needs_hessians and "calibrate" not in names:
        raise _fail(f"{where_of('stages', names.index('quantize'))}",
                    f"method {' and '.join(q.params.hessian_methods)} "
                    f"need{'s' if len(q.params.hessian_methods) == 1 else ''} Hessians, and "
                    "no `calibrate` stage captures them",
                    "add `- calibrate` (default: 128 self-generated samples of 128 tokens) "
                    "before `- quantize`, or use method rtn")
    if "write" not in [s.name for s in out]:
        at = len(out) - (out[-1].name == "evaluate")
        out.insert(at, Stage(name="write", params=WriteParams(), line=out[at - 1].line))
    return tuple(out)


def recipe_json_schema() -> dict:
    """JSON Schema of a recipe file (stages as one-key mappings or bare names)."""
    stage_items: list[dict[str, Any]] = []
    for name, model in STAGES.items():
        stage_items.append({"const": name})
        stage_items.append({"type": "object", "additionalProperties": False,
                            "properties": {name: {"anyOf": [model.model_json_schema(),
                                                            {"type": "null"}]}},
                            "required": [name]})
    schema: dict[str, Any] = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "tq-build recipe",
        "type": "object",
        "additionalProperties": False,
        "required": ["name", "source", "output", "stages"],
        "properties": {
            "name": {"type": "string", "pattern": "^[A-Za-z0-9][A-Za-z0-9._-]*$"},
            "source": {"anyOf": [SourceSpec.model_json_schema(), {"type": "string"}]},
            "output": {"type": "string"},
            "workdir": {"type": "string"},
            "calibration": CalibrateParams.model_json_schema(),
            "card": CardParams.model_json_schema(),
            "stages": {"type": "array", "items": {"anyOf": stage_items}, "minItems": 1},
        },
    }
    return schema


def recipe_reference_markdown() -> str:
    """The recipe reference as Markdown tables, generated from the typed models."""
    from typing import get_args as _args

    def typ(f) -> str:
        ann = f.annotation
        lits = [v for a in ([ann] + list(_args(ann))) if get_origin(a) is Literal
                for v in _args(a)]
        if lits:
            return " \\| ".join(f"`{v}`" for v in lits)
        text = str(ann).replace("typing.", "").replace("<class '", "").replace("'>", "")
        return text.replace("tqbuild.recipe.", "").replace(" | ", " \\| ")

    def table(title: str, model: type[BaseModel]) -> list[str]:
        rows = [f"### {title}", "", "| key | type | default | meaning |", "|---|---|---|---|"]
        for name, f in model.model_fields.items():
            default = "required" if f.is_required() else repr(f.default)
            if isinstance(f.default, BaseModel):
                default = "(mapping)"
            rows.append(f"| `{name}` | {typ(f)} | {default} | {f.description or ''} |")
        return rows + [""]

    out = ["# Recipe reference", "",
           "Generated from tq-build's typed recipe models (`tq-build schema --markdown`).",
           "Top level: `name`, `source`, `output`, `workdir`, `calibration`, `allow` (seed "
           "findings accepted), `stages` (a list of stage names "
           f"or one-key mappings, in the order {' → '.join(ORDER)}).", ""]
    out += table("source", SourceSpec)
    out += table("calibration (stage `calibrate`)", CalibrateParams)
    out += table("calibration.source", CalibSource)
    out += table("stage `rotate`", RotateParams)
    out += table("stage `quantize`", QuantizeParams)
    out += table("quantize.default / a rule's fields", QuantSpec)
    out += table("quantize.rules[]", QuantRule)
    out += table("quantize.guard", GuardParams)
    out += table("a trellis spec's `trellis:`", TrellisParams)
    out += table("`bits: {kmap, budget}` (trellis mixed k)", KMap)
    out += table("stage `write`", WriteParams)
    out += table("stage `evaluate`", EvaluateParams)
    out += table("evaluate.gate", GateParams)
    out += table("card (the artifact's README.md)", CardParams)
    return "\n".join(out)
