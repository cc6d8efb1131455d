"""exp, sigmoid, tanh, erf, softmax and rounding as CPU bundles compute them
(cw/compile/fast_math.py): vectorized, no libm call per element, within a few units in the last
place of float64's answer (rounding: exactly numpy's, half to even), and NaN and infinities as
numpy gives them."""

import math

import numpy as np
import pytest

from cw.compile import targets
from cw.compile.compiler import legalized
from cw.tvm_env import load_tvm

N = 1 << 16
FUNCTIONS = ("exp", "sigmoid", "tanh", "erf")


def _reference(name: str, x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    with np.errstate(over="ignore"):
        if name == "exp":
            return np.exp(x)
        if name == "sigmoid":
            return 1 / (1 + np.exp(-x))
        if name == "tanh":
            return np.tanh(x)
    return np.vectorize(math.erf, otypes=[np.float64])(x)


@pytest.fixture(scope="module")
def kernels(tmp_path_factory):
    """name -> run(x) for the four functions, compiled as `cw compile` legalizes them for this
    CPU; and the kernel library's bytes, as built with cw's legalization and with TVM's."""
    tvm = load_tvm()
    from tvm import relax

    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((N,), "float32"))
    rows = relax.Var("rows", relax.TensorType((64, 77), "float32"))
    ops = [relax.op.exp, relax.op.sigmoid, relax.op.tanh, relax.op.erf, relax.op.round]
    with bb.function("main", [x, rows]):
        with bb.dataflow():
            outs = [bb.emit(op(x)) for op in ops] + [bb.emit(relax.op.nn.softmax(rows, -1))]
            out = bb.emit_output(relax.Tuple(outs))
        bb.emit_func_output(out)
    target = targets.tvm_target("cpu", targets.default_cpu_arch())
    built = {}
    for how in ("cw", "tvm"):
        if how == "cw":
            mod, _ = legalized(bb.get(), target)
        else:
            mod = bb.get()
        path = tmp_path_factory.mktemp("fast_math") / f"{how}.so"
        tvm.compile(mod, target=target).export_library(str(path))
        built[how] = path
    vm = relax.VirtualMachine(tvm.runtime.load_module(str(built["cw"])), tvm.cpu())

    def run(xs: np.ndarray, scores: np.ndarray | None = None):
        padded = np.zeros(N, np.float32)
        padded[:len(xs)] = xs
        if scores is None:
            scores = np.zeros((64, 77), np.float32)
        outs = vm["main"](tvm.runtime.tensor(padded), tvm.runtime.tensor(scores))
        names = (*FUNCTIONS, "round", "softmax")
        return {name: o.numpy() for name, o in zip(names, outs)}, len(xs)

    return run, {how: path.read_bytes() for how, path in built.items()}


def test_no_libm_call_per_element(kernels):
    _, libraries = kernels
    # TVM's own lowering calls expf and erff (the check can fail); cw's calls neither
    assert b"expf" in libraries["tvm"] and b"erff" in libraries["tvm"]
    assert b"expf" not in libraries["cw"] and b"erff" not in libraries["cw"]


@pytest.mark.parametrize("lo,hi", [(-90, 90), (-2, 2), (-1e-3, 1e-3)])
def test_within_a_few_units_in_the_last_place(kernels, lo, hi):
    run, _ = kernels
    x = np.linspace(lo, hi, N, dtype=np.float32)
    got, _ = run(x)
    for name in FUNCTIONS:
        ref = _reference(name, x)
        # exp: float32 holds e^x up to x = 88.72; the polynomial's range reduction overflows
        # from 88.38 on (inf, documented in fast_math); values below 1e-30 are denormal-ish
        inside = (np.abs(ref) > 1e-30) & (ref < 3e38) & ~((name == "exp") & (x > 88.37))
        error = np.abs(got[name][inside] - ref[inside]) / np.abs(ref[inside])
        assert error.max() < 1e-6, (name, lo, hi, float(error.max()))


def test_nan_and_infinities(kernels):
    run, _ = kernels
    special = np.array([np.nan, np.inf, -np.inf, 0.0, 100.0, -100.0], np.float32)
    got, n = run(special)
    expected = {"exp": [np.nan, np.inf, 0.0, 1.0, np.inf, 0.0],
                "sigmoid": [np.nan, 1.0, 0.0, 0.5, 1.0, 0.0],
                "tanh": [np.nan, 1.0, -1.0, 0.0, 1.0, -1.0],
                "erf": [np.nan, 1.0, -1.0, 0.0, 1.0, -1.0]}
    for name, values in expected.items():
        np.testing.assert_allclose(got[name][:n], values, atol=1e-37, err_msg=name)


def test_softmax_rows(kernels):
    run, _ = kernels
    rng = np.random.default_rng(0)
    scores = (rng.standard_normal((64, 77)) * 30).astype(np.float32)
    scores[0, :] = -1e30  # a row masked out entirely but for one score
    scores[0, 5] = 0.0
    got, _ = run(np.zeros(1, np.float32), scores)
    s = scores.astype(np.float64)
    e = np.exp(s - s.max(axis=-1, keepdims=True))
    ref = e / e.sum(axis=-1, keepdims=True)
    np.testing.assert_allclose(got["softmax"], ref, rtol=1e-5, atol=1e-7)


def test_rounding_is_half_to_even(kernels):
    """LLVM's nearbyint in place of TVM's (tests/integration/test_quantized_activations.py has
    the kernel TVM's failed to build): numpy's rint on ties, near ties, past 2^23 and on NaN
    and infinities."""
    run, _ = kernels
    halves = np.arange(-8, 8, dtype=np.float32) + np.float32(0.5)
    x = np.concatenate([halves, np.nextafter(halves, np.float32(0)),
                        np.float32(2.0**23) + np.arange(4, dtype=np.float32),
                        np.linspace(-300, 300, 4097, dtype=np.float32),
                        np.array([np.nan, np.inf, -np.inf, -0.0, 1e30], np.float32)])
    got, n = run(x)
    np.testing.assert_array_equal(got["round"][:n], np.rint(x))
    assert np.signbit(got["round"][n - 2])  # -0.0 stays negative
