"""``Tiling``: the knobs of the default strategies that come from the target.

Example:
    >>> Tiling.for_vector_bits(512, 2, 48 << 10, 32, 2 << 20)  # doctest: +NORMALIZE_WHITESPACE
    Tiling(unroll=8, vector=32, chunk_bytes=24576, paired_rows=7, parallel_tiles=4,
           registers=32, lanes=16, l2_bytes=2097152, threads=2, streams=8)
    >>> Tiling(unroll=6).rows(56), Tiling(unroll=6).rows(7), Tiling(unroll=6).rows(56, budget=4)
    (4, 6, 4)
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType


@dataclass(frozen=True, slots=True)
class Tiling:
    """Register-tile sizes and cache and thread knobs of the reduction strategy."""

    unroll: int = 4
    """Rows of a register tile (at most: see :meth:`rows`)."""
    vector: int = 16
    """Lanes of a register tile (several vector registers wide)."""
    chunk_bytes: int = 16 * 1024
    """The slice of the vector-moving operand (a conv's weights, a GEMM's B panel) one cache
    block of the reduction reads per register tile: half of the L1 data cache, so it stays
    there while the row tiles sweep it."""
    paired_rows: int = 0
    """Rows of a tile two vector tiles wide; 0: never."""
    parallel_tiles: int = 1
    """Iterations the tile loops outside a reduction's cache chunks should give the thread
    pool when an epilogue is fused there; 1: one thread."""
    registers: int = 0
    """Vector registers of the target (accumulators, live vector loads and a broadcast must
    fit); 0: not known, the rows are capped by :attr:`unroll` only."""
    lanes: int = 8
    """float32 lanes of one vector register."""
    l2_bytes: int = 0
    """The target's L2 cache per core; 0: not known (no choice depends on it then)."""
    threads: int = 1
    """Threads the generated code runs on."""
    streams: int = 8
    """Rows of an operand read once (a GEMV's weights) that a reduction's chunk reads side by
    side, each a sequential stream: few enough for the hardware prefetchers to follow them
    all (they track a few dozen per core), enough that the output slice re-read per chunk
    costs little."""

    @staticmethod
    def for_vector_bits(
        bits: int,
        threads: int = 1,
        l1_bytes: int = 32 * 1024,
        registers: int | None = None,
        l2_bytes: int = 0,
    ) -> Tiling:
        """Two float32 vectors wide; as many rows as ``registers`` vector registers hold
        accumulators for (default: x86-64's, 16 with AVX2, 32 with AVX-512). With 32 or more
        a tile may also be 7 rows by two vector tiles (28 accumulators, each row's broadcast
        serving 4 FMAs). Cache chunks are half of ``l1_bytes``. With several threads, 2 tiles
        per thread at least: a worker the OS wakes late leaves its share to the others (see
        docs/performance.md for what other sizes measured)."""
        registers = registers or (32 if bits >= 512 else 16)
        many = registers >= 32
        return Tiling(
            unroll=8 if many else 6,
            vector=2 * bits // 32,
            chunk_bytes=l1_bytes // 2,
            paired_rows=7 if many else 0,
            parallel_tiles=2 * threads if threads > 1 else 1,
            registers=registers,
            lanes=bits // 32,
            l2_bytes=l2_bytes,
            threads=threads,
        )

    @property
    def steps(self) -> int:
        """Vector registers across one row of a register tile."""
        return max(self.vector // self.lanes, 1)

    def rows(self, extent: int, budget: int | None = None, folded: int | None = None) -> int:
        """Unrolled rows for a loop of ``extent``: all of it when it fits the budget
        (:attr:`unroll`, or less), else the largest divisor of it between half the budget and
        the budget, so the tiles have no ragged edge, else ``folded`` when that divides it,
        else the budget. ``folded`` is the rows that fit when the vectors the rows share are
        read as FMA memory operands rather than held in registers (one more than ``budget``
        with AVX2's 16 registers): more loads per FMA, but no ragged row tile, whose rows run
        one at a time on a chain of dependent FMAs (ResNet50's 7x7 convolutions on Zen 3:
        6 rows and a ragged one 3.7 ms, 7 rows 2.8 ms; where 4 rows divide, as for 56x56,
        7 rows ran 8-10% slower).

        Example:
            >>> t = Tiling.for_vector_bits(512)
            >>> t.unroll, t.rows(3), t.rows(28), t.rows(29)
            (8, 3, 7, 8)
            >>> avx2 = Tiling.for_vector_bits(256)
            >>> avx2.rows(14, budget=6), avx2.rows(14, budget=6, folded=7), avx2.rows(56, 6, 7)
            (6, 7, 4)
        """
        most = max(min(self.unroll, budget if budget is not None else self.unroll), 1)
        if extent <= most:  # (one tile: a tile larger than the loop would be all edge)
            return max(extent, 1)
        for u in range(most, max(most // 2, 1) - 1, -1):
            if extent % u == 0:
                return u
        if folded is not None and folded > most and extent % folded == 0:
            return folded
        return most


#: The fields of :class:`Tiling` a search may vary, each with its least valid value (the
#: others, ``registers``, ``lanes``, ``l2_bytes`` and ``threads``, are facts of the target).
KNOBS = MappingProxyType(
    {
        "unroll": 1,
        "vector": 1,
        "chunk_bytes": 64,
        "paired_rows": 0,
        "parallel_tiles": 1,
        "streams": 1,
    }
)
