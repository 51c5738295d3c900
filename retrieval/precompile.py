"""``python -m retrieval.precompile``: compile every numba loop into numba's cache, so that a
fresh machine's first search only loads them (``retrieval.compiled``; run by ``make install``)."""

from retrieval.bm25 import kernels as bm25_kernels
from retrieval.vector import kernels as vector_kernels


def main() -> None:
    for kernels in (bm25_kernels, vector_kernels):
        kernels.get()


if __name__ == "__main__":
    main()
