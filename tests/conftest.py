import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _has_gpu() -> bool:
    try:
        import cupy

        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:
        return False


HAS_GPU = _has_gpu()
gpu = pytest.mark.skipif(not HAS_GPU, reason="needs a CUDA GPU")


@pytest.fixture
def rng():
    # fresh random inputs every run; the seed is printed on failure for reproduction
    seed = int.from_bytes(os.urandom(4), "little")
    print(f"rng seed {seed}")
    return np.random.default_rng(seed)


def pytest_collection_modifyitems(config, items):
    for item in items:
        if "gpu" in item.keywords and not HAS_GPU:
            item.add_marker(pytest.mark.skip(reason="needs a CUDA GPU"))


@pytest.fixture
def dispatch_table():
    """install(entry): use a dispatch table entry for the current GPU's family during one test
    (the family's own entry comes back afterwards)."""
    from kbitcupy import dispatch as D

    fam = D.gpu_family()
    old = D.TABLES.get(fam)
    yield lambda entry: D.set_table(fam, entry)
    if old is None:
        D.TABLES.pop(fam, None)
        D.set_table("default", D.TABLES["default"])  # clears the cached choices and plans
    else:
        D.set_table(fam, old)
