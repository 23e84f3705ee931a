"""Mutants of the spectra study: a metric read from the wrong entries, a statistic over the wrong axes, a
sanity rule loosened or its bound misderived. Killed by `tests/experiments/test_spectra.py` (a run
against the model's dense maps; synthetic causal maps with distinct counts per axis)."""

from tests.mutant import Mutant

STUDY = "experiments/spectra/study.py"
SUMMARY = "experiments/spectra/summary.py"
CHECKS = "experiments/spectra/checks.py"
TESTS = ("tests/experiments/test_spectra.py",)

MUTANTS = (
    Mutant(
        STUDY,
        "first(spectra.entropy)[..., 1:].mean(axis=-1)",
        "first(spectra.entropy).mean(axis=-1)",
        "spectra: the entropy averaged over row 0 too",
        TESTS,
    ),
    Mutant(
        STUDY,
        '"sink_mass": first(spectra.mass)[..., 0] / length',
        '"sink_mass": first(spectra.mass)[..., 1] / length',
        "spectra: the sink's mass read at token 1",
        TESTS,
    ),
    Mutant(
        SUMMARY,
        "name: _spread(x.transpose(0, 2, 1, 3))",
        "name: _spread(x)",
        "spectra: per-length statistics over layers and heads instead of segments and heads",
        TESTS,
    ),
    Mutant(
        SUMMARY,
        "np.min(sigma_1 * np.sqrt(_column_counts(v, lengths)) / top)",
        "np.min(sigma_1 * np.sqrt(np.asarray(lengths)[:, None, None, None]) / top)",
        "spectra: the column bound over sqrt(T), not the rows that see the key",
        TESTS,
    ),
    Mutant(
        SUMMARY,
        '"norm_ratio_max": float(np.max(v["sigma_1"] / np.sqrt(top)))',
        '"norm_ratio_max": 0.0',
        "spectra: the norm's upper bound never checked",
        TESTS,
    ),
    Mutant(
        SUMMARY,
        "return float(np.max((x[:-1] - x[1:] - allowance[1:]) / x[1:]))",
        "return float(np.max((x[1:] - x[:-1] - allowance[1:]) / x[1:]))",
        "spectra: the growth row reads a rise as a fall",
        TESTS,
    ),
    Mutant(
        CHECKS,
        's["weyl_ratio_max"] <= 1 + tol',
        's["weyl_ratio_max"] <= 2',
        "spectra: Weyl's bound loosened",
        TESTS,
    ),
    Mutant(
        CHECKS,
        "low >= 1 - tol and high <= 1 + tol",
        "low >= 0.9 and high <= 1 + tol",
        "spectra: sigma_1 >= 1 loosened",
        TESTS,
    ),
)
