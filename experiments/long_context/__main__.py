"""python -m experiments.long_context --config configs/long_context.py --workdir runs/lc"""

from experiments.lab.cli import study_main
from experiments.long_context import STUDY

if __name__ == "__main__":
    study_main(STUDY)
