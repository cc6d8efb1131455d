"""The compiled simulator (cw/replay/native/). Everything else is in pyproject.toml.

It is optional: where no C++ compiler is found, cw installs without it and `cw replay
--simulate` runs the Python simulator (cw/replay/simulate.py), which takes the same decisions
more slowly."""

import glob

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "cw.replay._fastsim",
            sources=["cw/replay/native/module.cpp"],
            depends=glob.glob("cw/replay/native/*.hpp"),
            language="c++",
            extra_compile_args=["-O2", "-std=c++17"],
            extra_link_args=["-s"],  # no debug symbols: 2 MB -> ~0.2 MB
            define_macros=[("Py_LIMITED_API", "0x030B0000")],
            py_limited_api=True,
            optional=True,
        )
    ],
    # the stable ABI: one wheel for CPython 3.11 and later
    options={"bdist_wheel": {"py_limited_api": "cp311"}},
)
