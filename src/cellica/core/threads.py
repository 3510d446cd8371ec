"""A fixed thread count for numerical kernels, so results do not depend on the machine's or the job's.

BLAS (numpy, scikit-learn) and torch split reductions (sums, matrix products,
eigen-decompositions) into as many partial sums as they have threads, so the last
bits of a result change with the thread count, and through LightGBM's bins or a
rank those bits can change a reported number. Every stage that computes such
results (transforms, batch metrics, ground-truth recovery) runs its kernels with
:data:`NUMERIC_THREADS` threads whatever ``--cores`` or ``OMP_NUM_THREADS`` say;
the per-gene classifiers use one LightGBM thread per model.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator

NUMERIC_THREADS = 2


@contextlib.contextmanager
def fixed_threads(n: int = NUMERIC_THREADS) -> Iterator[None]:
    """Run the block with ``n`` BLAS/OpenMP threads and, if torch is loaded, ``n`` torch threads."""
    from threadpoolctl import threadpool_limits

    torch = sys.modules.get("torch")
    saved = torch.get_num_threads() if torch is not None else None
    if torch is not None:
        torch.set_num_threads(n)
    try:
        with threadpool_limits(limits=n):
            yield
    finally:
        if torch is not None and saved is not None:
            torch.set_num_threads(saved)


@contextlib.contextmanager
def pool_size(n: int = NUMERIC_THREADS) -> Iterator[None]:
    """Libraries that size their thread pools by ``os.cpu_count()`` see ``n`` inside the block.

    copairs gives each thread of its pool one batch of pairs or one null distribution
    (null size x control wells), hundreds of MB each at genome scale, and counts the node's
    CPUs, not the job's: on a 64-core node that is 64 of them at once. Each item is computed
    alone and seeded by itself, so the pool size changes memory and time, never a number.
    """
    import os

    saved = os.cpu_count
    os.cpu_count = lambda: n
    try:
        yield
    finally:
        os.cpu_count = saved
