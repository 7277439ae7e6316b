import numpy as np
import pytest

from tqbuild.errors import UnsupportedSize
from tqbuild.kernels import hadamard as H

GOLDENS = {(42, 0): "+++-+----++-+---", (42, 1): "--++---+-++---+-", (7, 3): "-+++-+--++-+++-+"}


@pytest.mark.parametrize("key", list(GOLDENS))
def test_sign_stream_goldens(key):
    seed, lane = key
    s = "".join("+" if v > 0 else "-" for v in H.signs(seed, 16, lane))
    assert s == GOLDENS[key]


@pytest.mark.parametrize("n,k", [(576, 36), (5120, 40), (64, 1), (1536, 12), (36, 36),
                                 (2048, 1), (3584, 28), (1280, 40)])
def test_orthonormal_and_factor(n, k):
    assert H.factor(n) == k
    r = H.random_hadamard(3, n, 0)
    np.testing.assert_allclose(r @ r.T, np.eye(n), atol=1e-12)


def test_quarot_constants_match_goldens(goldens):
    with np.load(goldens / "hadamard" / "quarot_hadK_pm1.npz") as z:
        for k in H.QUAROT_ORDER:
            np.testing.assert_array_equal(H._quarot(k), z[f"quarot_had{k}"])


def test_construction_is_kron_of_quarot_and_sylvester():
    h = H.hadamard(576)
    ref = np.kron(H._quarot(36), H.sylvester(16)) / 24.0
    np.testing.assert_array_equal(h, ref)


def test_unsupported_size_names_n_and_neighbours():
    with pytest.raises(UnsupportedSize) as e:
        H.check_size(100, "hidden_size")
    msg = str(e.value)
    assert "n = 100" in msg and "96" in msg and "104" in msg
