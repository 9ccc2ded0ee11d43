"""Builds the Cython kernels in zephon/_ext.

Every ``zephon/_ext/<name>.pyx`` becomes the extension ``zephon._ext.<name>``; its pure-numpy
twin ``zephon/_ext/<name>_np.py`` is used whenever the extension is missing, so a failed
compile degrades speed, never behaviour.
"""

from __future__ import annotations

import glob
import os

from setuptools import setup


def _extensions():
    try:
        import numpy
        from Cython.Build import cythonize
        from setuptools import Extension
    except ImportError as e:  # no build tools: the numpy fallbacks serve, and we say so
        if os.environ.get("ZEPHON_REQUIRE_EXT", "").strip() not in ("", "0"):
            raise SystemExit(f"ZEPHON_REQUIRE_EXT is set but the kernels cannot be built: {e}") from e
        import sys

        print(f"warning: zephon's Cython kernels are not built ({e}); the slower numpy "
              "fallbacks will serve", file=sys.stderr)
        return []
    exts = []
    for pyx in sorted(glob.glob(os.path.join("zephon", "_ext", "*.pyx"))):
        name = "zephon._ext." + os.path.splitext(os.path.basename(pyx))[0]
        exts.append(
            Extension(
                name,
                [pyx],
                include_dirs=[numpy.get_include()],
                define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")],
                extra_compile_args=["-O3"],
            )
        )
    return cythonize(
        exts,
        compiler_directives={
            "language_level": "3",
            "boundscheck": False,
            "wraparound": False,
            "cdivision": True,
            "initializedcheck": False,
        },
        quiet=True,
    )


setup(ext_modules=_extensions())
