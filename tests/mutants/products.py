"""Mutants of the tiled products (`attnjax.analysis.products`): a tile that only one query-key pair
sees, at a block's last query or a chunk's first key, skipped. Killed by
`tests/attnjax/analysis/test_products.py` (tiles of 5 queries and 7 keys against the dense map)."""

from tests.mutant import Mutant

PRODUCTS = "attnjax/analysis/products.py"
TESTS = ("tests/attnjax/analysis/test_products.py",)
SKIP = (
    "        q_start, q_size, num_keys, k_start, k_size, is_causal, local_window\n    )\n    return"
)

MUTANTS = (
    Mutant(
        PRODUCTS,
        SKIP,
        SKIP.replace("q_size,", "q_size - 1,"),
        "products: a tile seen only by its block's last query skipped",
        TESTS,
    ),
    Mutant(
        PRODUCTS,
        SKIP,
        SKIP.replace("k_start,", "k_start + 1,"),
        "products: a tile seen only at its chunk's first key skipped",
        TESTS,
    ),
)
