"""What the compute-sanitizer drivers (sanitize_driver.py, sanitize_cluster.py) share: the package on
the import path, a fixed-seed generator, value checks that collect failures, and the exit status that
makes a sanitizer run check values too."""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import cupy as cp  # noqa: E402

rng = np.random.default_rng(0)
bad = []


def check(name, out, ref, tol=3e-3):
    err = float(cp.linalg.norm(out.astype(cp.float64) - ref) / cp.linalg.norm(ref))
    print(f"{name}: rel err {err:.2e}")
    if not err < tol:
        bad.append(name)


def finish():
    cp.cuda.runtime.deviceSynchronize()
    print("BAD:", bad if bad else "none")
    sys.exit(1 if bad else 0)
