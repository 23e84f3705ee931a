"""python -m experiments.softmax_scaling --config configs/softmax_scaling.py --workdir runs/softmax_scaling"""

from experiments.lab.cli import study_main
from experiments.softmax_scaling import STUDY

if __name__ == "__main__":
    study_main(STUDY)
