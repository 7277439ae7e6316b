"""`--nproc N`: run this same command under torchrun (torch.distributed.run,
in this process), one worker per rank, and exit with the first failing
worker's own exit code instead of torchrun's traceback."""

from __future__ import annotations


def worker_args(argv: list[str]) -> list[str]:
    """The command line minus `--nproc N` / `--nproc=N`."""
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
        elif a == "--nproc":
            skip = True
        elif not a.startswith("--nproc="):
            out.append(a)
    return out


def torchrun(nproc: int, argv: list[str]) -> int:
    import os

    # the host's cores split between the ranks (torchrun would pin each to 1 and
    # warn); an explicit --threads wins in each worker
    os.environ.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // nproc)))
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import get_args_parser, run

    args = get_args_parser().parse_args(
        ["--standalone", f"--nproc-per-node={nproc}", "--module", "tqbuild",
         *worker_args(argv)])
    try:
        run(args)
    except ChildFailedError as e:
        codes = [f.exitcode for _, f in sorted(e.failures.items())]
        bad = [c for c in codes if c and c > 0]
        return bad[0] if bad else 130 if any(c == -2 for c in codes) else 1
    return 0
