"""python -m experiments.width --config configs/width.py --workdir DIR"""

from experiments.lab.cli import study_main
from experiments.width import STUDY

if __name__ == "__main__":
    study_main(STUDY)
