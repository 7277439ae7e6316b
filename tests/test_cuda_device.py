"""Every ctypes launch of a CUDA library runs with its tensor's device current
(`nvcc.on_tensor_device`): the libraries' runtime launches on, counts the SMs of and raises
shared memory on the calling thread's current device, which stays cuda:0 for a model on
another GPU. Checked here without a GPU: every function that passes a stream to a
launch is wrapped, and the wrapper enters the tensor's device."""

from __future__ import annotations

import contextlib
import inspect

import torch

from tqbuild.kernels import nvcc, pair_viterbi_cuda, viterbi_cuda
from tqbuild.runtime import affine_cuda, pair_cuda, trellis_cuda

MODULES = (trellis_cuda, pair_cuda, affine_cuda, viterbi_cuda, pair_viterbi_cuda)


def test_every_launching_function_runs_on_its_tensors_device():
    launching = []
    for mod in MODULES:
        for name, fn in vars(mod).items():
            if not (inspect.isfunction(fn) and fn.__module__ == mod.__name__):
                continue
            src = inspect.getsource(inspect.unwrap(fn))
            if "stream_of(" in src or ".cuda_stream)" in src:  # a launch on torch's stream
                launching.append((mod.__name__, name, getattr(fn, "on_tensor_device", False)))
    assert len(launching) >= 5, launching
    assert all(wrapped for *_, wrapped in launching), launching


def test_the_wrapper_enters_the_tensors_device(monkeypatch):
    entered = []

    @contextlib.contextmanager
    def device(d):
        entered.append(d)
        yield

    monkeypatch.setattr(torch.cuda, "device", device)

    class Tensor:
        device = torch.device("cuda", 1)

    f = nvcc.on_tensor_device(lambda x, y, *, z: (y, z))
    assert f(Tensor(), 2, z=3) == (2, 3)
    assert entered == [torch.device("cuda", 1)]
    assert f(torch.zeros(1), 4, z=5) == (4, 5) and len(entered) == 1  # a CPU tensor: as is
