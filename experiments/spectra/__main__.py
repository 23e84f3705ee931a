"""python -m experiments.spectra --config configs/spectra.py --workdir DIR"""

from experiments.lab.cli import study_main
from experiments.spectra import STUDY

if __name__ == "__main__":
    study_main(STUDY)
