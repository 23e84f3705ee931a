"""python -m experiments.rank_collapse --config configs/rank_collapse.py --workdir runs/rc"""

from experiments.lab.cli import study_main
from experiments.rank_collapse import STUDY

if __name__ == "__main__":
    study_main(STUDY)
