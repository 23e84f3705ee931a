"""python -m experiments.pretrained --config configs/pretrained.py[:smoke|:causal|:causal_smoke] --workdir runs/pt"""

from experiments.lab.cli import study_main
from experiments.pretrained import STUDY

if __name__ == "__main__":
    study_main(STUDY)
