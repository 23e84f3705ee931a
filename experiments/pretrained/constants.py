"""The pretrained study's thresholds, names and labels, read by the summary, the checks and the report.

Every threshold was fixed before the first run; none is to be relaxed.
"""

# --------------------------------------------------------------------------
# Thresholds

# Below this relative residual float32 rounding dominates, and ratios of
# log-residuals mean nothing (as in the rank-collapse study).
RESIDUAL_FLOOR = 1e-5
# A per-sentence decay rate is fitted on at least this many resolved layers >= 1.
MIN_RATE_LAYERS = 3
# Doubly exponential decay, r_(l+1) <= r_l^c with c >= 2: log r_(l+1) / log r_l >= 2, on resolved layers >= 1.
DOUBLY_EXPONENTIAL_RATIO = 2.0
FIRST_RATIO_LAYER = 1
# Fewer log-ratios cannot tell the rates apart: r_l = q^l (exponential from layer 0) gives ratios (l + 1) / l,
# 2 and 1.5 on the pairs from layer 1, so two ratios separate it from doubly exponential decay by one ratio only.
MIN_LOG_RATIOS = 3
# Wu et al. 2024: exponential collapse, the per-sentence decay factor per layer below 1 on this interval.
RATE_QUANTILES = (0.05, 0.95)
# Xiao et al. 2023: more than half of the attention on the first token, in most layers past the bottom two.
SINK_SHARE = 0.5
BOTTOM_LAYERS = 2
# Clark et al. 2019: layers 6-10 of BERT-base's 12, as fractions of the depth.
MIDDLE_LAYERS = (6 / 12, 10 / 12)
# Why Clark et al.'s [SEP] finding is not tested here (every bidirectional run of this study).
CLARK_SETTING = (
    "Setting differs: Clark et al. read BERT-base (12 layers) on 1000 Wikipedia segments of at most 128 "
    "tokens, two consecutive paragraphs each ([CLS] p1 [SEP] p2 [SEP]), where over half of the attention in "
    "layers 6-10 goes to [SEP] (and [SEP] itself attends to the [SEP]s); this study gives single sentences with "
    "one [SEP] to the checkpoint (all-MiniLM-L6-v2 by default: 6 layers, distilled and fine-tuned for "
    "sentence embeddings). The [SEP] share is a reading, not a test of their finding."
)
# Wu et al. 2024: the rows of P_L are within this total-variation distance of e_1.
FIRST_TOLERANCE = 1e-3
# |lambda_2| <= tau up to float32 rounding of both.
BOUND_TOLERANCE = 1e-5
# Sun et al. 2024's criterion for one massive activation: |a| >= 100 and >= 1000 x the median |a| of its
# hidden state.
MASSIVE_VALUE, MASSIVE_FACTOR = 100.0, 1000.0
# "Most" (Xiao's sink in most layers; Sun's activations on the first token or delimiters, in a few
# dimensions): more than half, the weakest reading of the claim.
MAJORITY = 0.5
# Sun et al. 2024: "a few" fixed dimensions, read as the 3 with the most hits; spread (std / mean) of the
# largest activation over inputs <= 25% for "largely constant" (a threshold of this study: the paper gives
# no number).
FEW_DIMS = 3
MASSIVE_SPREAD = 0.25
# Why Sun et al.'s criterion is not tested on a post-norm model.
SUN_SETTING = (
    "Setting differs: Sun et al. read the residual stream (each layer's output) of pre-LayerNorm LLMs and "
    "ViTs, not post-LayerNorm encoders; in a post-LayerNorm model the hidden states read here are "
    "LayerNorm outputs, whose entries are at most sqrt(D - 1) max|gamma| + max|beta|, so the reading is not "
    "a test of their finding (the residual sum before each LayerNorm is not measured)."
)
# A variant whose relative residual falls below this fraction of r_0 is discussed in the text.
RELATIVE_FALL = 0.5
# A first-token norm this many times the median token's is a massive activation (Sun et al. 2024).
MASSIVE_RATIO = 10

# Sliding windows W of the band-masked surgery variants (Wu et al. 2024: local masks slow the collapse):
# query t sees keys t - W < s (and s < t + W when bidirectional), so W = 2 is the narrowest mask that mixes.
BAND_WIDTHS = (2, 4)

# --------------------------------------------------------------------------
# Names and labels

# How a kept QK-norm is named in a variant's norms (`study.kept_norms`); its presence makes the norm-free
# network's rows hypotheses (`checks.pure_setting`).
QK_NORM = "QK-norm"

VARIANT_LABELS = {
    "full": "full model",
    "no_skip": "no skips",
    "no_mlp": "no MLPs",
    "attention_only": "attention only",
    "no_norm": "attention only, no norms",
    **{
        f"{base}_band{width}": f"{label}, window {width}"
        for base, label in (
            ("attention_only", "attention only"),
            ("no_norm", "attention only, no norms"),
        )
        for width in BAND_WIDTHS
    },
}
# The variants without skips and MLPs: the attention-only networks whose collapse the papers predict.
ATTENTION_ONLY = ("attention_only", "no_norm")
# The attention-only variants as the check names call them.
CHECK_LABELS = {
    "attention_only": "attention only (norms kept)",
    "no_norm": "attention only, no norms",
    **{
        f"{base}_band{width}": f"{label}, window {width}"
        for base, label in (
            ("attention_only", "attention only"),
            ("no_norm", "attention only, no norms"),
        )
        for width in BAND_WIDTHS
    },
}
# What the sink tokens are, per model family, and the sink tokens the sink-excluded metrics leave out.
SINK_LABELS = {"bert": "[CLS], [SEP] and punctuation", "llama": "the first token"}
CONTENT_LABELS = {"bert": "[CLS] and [SEP]", "llama": "the first token"}
