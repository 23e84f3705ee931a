"""python -m experiments.pretrained --config configs/pretrained.py[:VARIANT] --workdir runs/pt

VARIANT: smoke, causal, causal_smoke, gemma3, gemma3_smoke (`configs/pretrained.py`).
"""

from experiments.lab.cli import study_main
from experiments.pretrained import STUDY

if __name__ == "__main__":
    study_main(STUDY)
