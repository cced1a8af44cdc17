"""Writes numpy_permutations.txt: np.random.RandomState(seed).permutation(n) for a set of
(seed, n), the reference tokenfeed's epoch order must match bit for bit.

Run from this directory: python3 make_numpy_fixtures.py (needs numpy)."""
import numpy as np

CASES = [(0, 1), (0, 2), (1, 10), (42, 10), (1337, 100), (1338, 100), (7, 1000),
         (2**32 - 1, 50), (123456789, 65537), (5, 3000)]

with open("numpy_permutations.txt", "w") as out:
    out.write(f"# numpy {np.__version__}: seed n permutation...\n")
    for seed, n in CASES:
        perm = np.random.RandomState(seed).permutation(n)
        out.write(f"{seed} {n} " + " ".join(str(int(v)) for v in perm) + "\n")
