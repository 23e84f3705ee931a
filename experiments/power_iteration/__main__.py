"""python -m experiments.power_iteration --config configs/power_iteration.py --workdir runs/pi"""

from experiments.lab.cli import study_main
from experiments.power_iteration import STUDY

if __name__ == "__main__":
    study_main(STUDY)
