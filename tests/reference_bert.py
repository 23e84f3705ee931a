"""A float64 NumPy BERT encoder written from the published equations
(Devlin et al. 2019, "BERT: Pre-training of deep bidirectional transformers";
Vaswani et al. 2017), sharing no code with attnjax. Weights are the Hugging
Face names of a `BertModel` checkpoint (Linear weights stored `[out, in]`).

    x_0 = LN(E_word[ids] + E_pos[0:T] + E_type[types])
    a   = softmax(Q K^T / sqrt(d_h) with padded keys removed) V,   per head
    x'  = LN(x + a W_o^T + b_o)
    x   = LN(x' + W_2 gelu(W_1 x' + b_1) + b_2),    gelu(z) = z Phi(z) (exact)

Sentence embedding (sentence-transformers): mean of the last hidden states
over real tokens, divided by its L2 norm.
"""

import math

import numpy as np


def _layer_norm(x, weight, bias, eps):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * weight + bias


def _gelu_exact(x):
    erf = np.vectorize(math.erf)
    return 0.5 * x * (1.0 + erf(x / math.sqrt(2.0)))


def _dense(x, weights, name):
    return x @ weights[f"{name}.weight"].T + weights[f"{name}.bias"]


def _attention(x, weights, prefix, num_heads, valid):
    """x [T, D], valid [T] bool -> (out [T, D], probabilities [H, T, T])."""
    t, d = x.shape
    dh = d // num_heads

    def split(y):
        return y.reshape(t, num_heads, dh).transpose(1, 0, 2)

    q, k, v = (split(_dense(x, weights, f"{prefix}.self.{n}")) for n in ("query", "key", "value"))
    logits = q @ k.transpose(0, 2, 1) / math.sqrt(dh)
    logits = np.where(valid[None, None, :], logits, -np.inf)
    logits = logits - logits.max(-1, keepdims=True)
    p = np.exp(logits)
    p = p / p.sum(-1, keepdims=True)
    context = (p @ v).transpose(1, 0, 2).reshape(t, d)
    return _dense(context, weights, f"{prefix}.output.dense"), p


def bert_forward(weights, config, ids, types=None, valid=None):
    """One sentence: ids [T] -> (hidden [L + 1, T, D], attention [L, H, T, T]), float64."""
    w = {k: np.asarray(v, np.float64) for k, v in weights.items()}
    eps = config["layer_norm_eps"]
    ids = np.asarray(ids)
    t = ids.shape[0]
    types = np.zeros(t, int) if types is None else np.asarray(types)
    valid = np.ones(t, bool) if valid is None else np.asarray(valid, bool)
    x = w["embeddings.word_embeddings.weight"][ids] + w["embeddings.position_embeddings.weight"][:t]
    x = x + w["embeddings.token_type_embeddings.weight"][types]
    x = _layer_norm(x, w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"], eps)
    hidden, probs = [x], []
    for layer in range(config["num_hidden_layers"]):
        p = f"encoder.layer.{layer}"
        a, prob = _attention(x, w, f"{p}.attention", config["num_attention_heads"], valid)
        x = _layer_norm(
            x + a,
            w[f"{p}.attention.output.LayerNorm.weight"],
            w[f"{p}.attention.output.LayerNorm.bias"],
            eps,
        )
        h = _gelu_exact(_dense(x, w, f"{p}.intermediate.dense"))
        x = _layer_norm(
            x + _dense(h, w, f"{p}.output.dense"),
            w[f"{p}.output.LayerNorm.weight"],
            w[f"{p}.output.LayerNorm.bias"],
            eps,
        )
        hidden.append(x)
        probs.append(prob)
    return np.stack(hidden), np.stack(probs)


def sentence_embedding(last_hidden, valid):
    """Mean over real tokens, L2-normalised: [T, D], [T] -> [D]."""
    valid = np.asarray(valid, np.float64)[:, None]
    mean = (last_hidden * valid).sum(0) / valid.sum()
    return mean / np.linalg.norm(mean)
