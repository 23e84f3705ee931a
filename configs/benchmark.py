"""Benchmark sizes and targets, one ConfigDict per section.

    python -m experiments.benchmark --config configs/benchmark.py
    python -m experiments.benchmark --config configs/benchmark.py:smoke
    python -m experiments.benchmark --config configs/benchmark.py --config.sections='("attention",)'

Every figure with a target is a ratio against a reference measured in the
same run (median of `repeats` timed calls after a warm-up call). The default
runs in 12-15 minutes on a 2-core CPU (719 s on 2026-12-06: the pretrained
section takes about 3 minutes, training 2, streaming and analysis under 2
each); `smoke` in under a minute, with sizes too small for the targets to
mean anything (its rows carry none).
"""

from ml_collections import config_dict

SECTIONS = (
    "attention",
    "compile",
    "linear",
    "analysis",
    "training",
    "train_step",
    "pretrained",
    "streaming",
)


def _attention():
    return config_dict.ConfigDict(
        dict(
            # Any backend, float32: attnjax vs jax.nn (xla), with weights, naive einsum.
            # Forward, and forward+backward (gradients of sum(out**2)), both with the target.
            batch=2,
            length=2048,
            heads=8,
            head_dim=64,
            repeats=7,
            target=1.05,
            # Forward+backward at the studies' shapes (the rank-collapse model: D=64,
            # 4 heads of 16, B=64), target at each length; small calls, many repeats.
            small_lengths=(12, 33, 64),
            small_batch=64,
            small_heads=4,
            small_head_dim=16,
            small_repeats=41,
            small_target=1.0,
            # Any backend, float32, causal forward at length (batch 1): attnjax (query blocks)
            # against its dense core, and attnjax's fraction of the matmul peak.
            long_length=8192,
            long_heads=9,
            long_head_dim=64,
            long_repeats=3,
            long_target_peak_fraction=0.2,
            # Accelerators only (bf16, causal): attnjax vs cuDNN at each length,
            # forward and forward+backward, TFLOP/s against a measured matmul peak.
            gpu_batch=4,
            gpu_lengths=(4096, 8192, 16384),
            gpu_heads=16,
            gpu_head_dim=128,
            gpu_repeats=20,
            gpu_target_length=8192,
            gpu_target_vs_cudnn=0.95,
            gpu_target_peak_fraction=0.5,
            # Square matmul timed for the peak (float32 on CPU, bf16 on GPU).
            peak_matmul_size=2048,
            gpu_peak_matmul_size=8192,
        )
    )


def _compile():
    # Compile time of a Transformer forward+backward against its shallowest depth.
    # The fastest of `trials` compiles counts (caches cleared before each).
    return config_dict.ConfigDict(
        dict(depths=(2, 8, 32), features=64, heads=4, length=64, batch=8, trials=2, target=2.0)
    )


def _linear():
    return config_dict.ConfigDict(
        dict(
            # Crossover sweep: chunked causal linear (FAVOR+), per-position
            # recurrence and exact causal attention over T; exact runs while its
            # float32 logits fit in `exact_max_gib`.
            lengths=(256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536),
            heads=8,
            head_dim=64,
            num_features=256,
            exact_max_gib=2.0,
            repeats=3,
            # Targets at these lengths (both in `lengths`): speedup over exact at
            # `short`, time and memory growth from `short` to `long`.
            short=8192,
            long=16384,
            target_speedup=5.0,
            target_growth=2.5,
            target_vs_scan_memory=0.25,
            # Accelerators only: fwd+bwd in bf16 against cuDNN exact attention.
            gpu_length=32768,
            gpu_heads=16,
            gpu_head_dim=64,
            gpu_num_features=128,
        )
    )


def _analysis():
    # All metrics (and, with `parts`, the main parts) against one batched SVD; every
    # function under jit(vmap(f)) against jit(f) on the batch, `vmap_rounds` alternations
    # (`vmap_functions`: the names of `experiments/benchmark/analysis.py:vmap_cases`, () for all).
    return config_dict.ConfigDict(
        dict(
            batch=64,
            n=256,
            rounds=7,
            parts=True,
            target=6.0,
            vmap_rounds=5,
            vmap_target=1.5,
            vmap_functions=(),
        )
    )


def _recall_run(smoke: bool):
    """The training setting of the rank-collapse study's train sweep, written out here so the
    benchmark reads no study's config: multi-query associative recall, causal, the model and
    the optimiser (`experiments.lab.models`' `task`, `model`, `train` blocks). `smoke`: the
    smaller setting of that study's smoke variant."""
    run = config_dict.ConfigDict(
        dict(
            seed=0,
            num_seeds=2 if smoke else 5,
            causal=True,
            task=dict(name="associative_recall", num_pairs=8, num_queries=8, vocab_size=32),
            model=dict(
                features=64,
                num_heads=4,
                mlp_ratio=4,
                positions="learned",
                feature_map="favor_plus",
                num_features=64,
                dtype="float32",
            ),
            train=dict(
                steps=1200,
                batch_size=64,
                learning_rate=3e-3,
                warmup_steps=80,
                weight_decay=0.01,
                log_every=100,
                eval_batches=4,
            ),
        )
    )
    if smoke:
        run.task.update(num_pairs=4, num_queries=4, vocab_size=16)
        run.model.features = 32
        run.train.update(steps=40, batch_size=16, warmup_steps=4, log_every=20, eval_batches=1)
    return run


def _training():
    return config_dict.ConfigDict(
        dict(
            # Training step of the rank-collapse study's training model (`run`) for
            # each compute dtype; bf16 keeps float32 params.
            run=_recall_run(smoke=False),
            architecture="skip_mlp",
            depth=8,
            dtypes=("float32", "bfloat16"),
            steps_per_call=20,
            repeats=5,
            # Seeds in one program against sequential runs on one device (JAX's
            # default), on the smaller model (`seeds_run`).
            seeds_run=_recall_run(smoke=True),
            seeds_architecture="skip_mlp",
            seeds_depth=2,
            num_seeds=8,
            steps=40,
            seeds_repeats=5,
            target_seeds=2.0,
            # Also time the program on one device and sequential runs with the
            # batch sharded over every device (context rows, no target).
            all_variants=True,
            # XLA CPU devices to shard the seeds over (0: one per core); set before
            # JAX starts, so only when the benchmark is the program.
            cpu_devices=0,
        )
    )


def _train_step():
    return config_dict.ConfigDict(
        dict(
            # One AdamW step of attnjax.nn.Transformer against the same model built
            # from flax.nnx layers, at each (L, D, H, B, T): the rank-collapse
            # model's shape, and a longer sequence. Target: attnjax s / flax s.
            shapes=((8, 64, 4, 64, 33), (4, 64, 4, 8, 512)),
            vocab_size=64,
            learning_rate=1e-3,
            weight_decay=0.01,
            seed=0,
            repeats=9,
            target=1.0,
        )
    )


def _pretrained():
    return config_dict.ConfigDict(
        dict(
            # MiniLM encoder forward; SmolLM2 prefill and cached greedy decoding
            # (tokens/s); against Hugging Face's PyTorch models where installed, on
            # as many threads as JAX uses. Targets: attnjax / PyTorch time ratios.
            # The checkpoints: '' for the bundled all-MiniLM-L6-v2 and SmolLM2-135M, else a
            # BERT-family directory and a llama-family GGUF file or directory.
            encoder_path="",
            causal_lm_path="",
            bert_batch=32,
            bert_length=128,
            prefill_length=512,
            decode_prompt=64,
            decode_tokens=33,
            # The all-head ablation sweep (one program) against a loop of single edits, timed
            # on sweep_loop_heads heads and extrapolated to every head.
            sweep_length=16,
            sweep_chunk=16,
            sweep_loop_heads=4,
            # sigma_1, sigma_2 of the causal LM's own maps on prose, streaming, against float64
            # dense SVDs of these layers (experiments/benchmark/real_maps.py).
            real_map_length=2048,
            real_map_layers=(0, 29),
            repeats=3,
            peak_matmul_size=2048,
            forward_target=1.1,
            decode_target=1.0,
            # PyTorch's intra-op threads (0: one per core). On a machine whose cores are
            # busy with other work, fewer threads than cores avoids OpenMP thrashing.
            torch_threads=0,
        )
    )


def _streaming():
    return config_dict.ConfigDict(
        dict(
            # attnjax.analysis.attention_statistics against the forward pass of the same
            # causal attention at one SmolLM2-135M layer's shape (T=8192, H=9, K=3, D=64).
            length=8192,
            heads=9,
            kv_heads=3,
            head_dim=64,
            repeats=3,
            # attention_statistics' defaults (chosen by this row: blocks of 64 queries over 512 keys).
            chunk_size=512,
            query_chunk_size=64,
            target=1.3,
            sink_positions=(0,),
            window=128,
            # Compiled temp memory of the statistics program over T (H=8): growth per doubling.
            memory_lengths=(2048, 4096, 8192, 16384, 32768),
            memory_heads=8,
            memory_target=2.2,
            # sigma_1, sigma_2 of every head's map by subspace iteration (analysis.products) at
            # these lengths (time, compiled temporaries), and the dense SVD up to spectra_dense_max.
            spectra_lengths=(2048, 4096, 8192),
            spectra_iterations=20,
            spectra_dense_max=2048,
        )
    )


def get_config(arg: str | None = None):
    """Default benchmark; `arg='smoke'` for the under-a-minute variant."""
    config = config_dict.ConfigDict()
    config.sections = SECTIONS
    config.check_targets = True
    config.attention = _attention()
    config.compile = _compile()
    config.linear = _linear()
    config.analysis = _analysis()
    config.training = _training()
    config.train_step = _train_step()
    config.pretrained = _pretrained()
    config.streaming = _streaming()
    if arg == "smoke":
        config.check_targets = False
        config.attention.update(
            batch=1,
            length=256,
            heads=4,
            head_dim=32,
            repeats=3,
            peak_matmul_size=256,
            small_lengths=(12,),
            small_batch=4,
            small_repeats=3,
            long_length=2048,
            long_heads=1,
            long_head_dim=16,
            long_repeats=1,
            gpu_batch=1,
            gpu_lengths=(1024,),
            gpu_target_length=1024,
            gpu_repeats=3,
            gpu_peak_matmul_size=1024,
        )
        config.compile.update(depths=(1, 2), features=32, trials=1)
        config.linear.update(
            lengths=(128, 256),
            heads=2,
            head_dim=16,
            num_features=32,
            short=128,
            long=256,
            gpu_length=1024,
            gpu_heads=4,
            gpu_num_features=32,
        )
        config.analysis.update(
            batch=8,
            n=16,
            rounds=3,
            parts=False,
            vmap_rounds=1,
            vmap_functions=("stationary_distribution", "dobrushin"),
        )
        # Smaller programs compile faster: one attention-only layer.
        # (bf16 training has its own test: tests/experiments/lab/test_mixed_precision.py.)
        config.training.run = _recall_run(smoke=True)
        config.training.update(
            architecture="attention_only",
            depth=1,
            dtypes=("float32",),
            steps_per_call=4,
            repeats=2,
            seeds_architecture="attention_only",
            seeds_depth=1,
            num_seeds=2,
            steps=8,
            seeds_repeats=1,
            all_variants=False,
        )
        config.train_step.update(shapes=((1, 32, 4, 4, 12),), repeats=2)
        # Both real models still load (their loading is most of this section's time).
        config.pretrained.update(
            bert_batch=2,
            bert_length=16,
            prefill_length=16,
            decode_prompt=8,
            decode_tokens=3,
            repeats=1,
            peak_matmul_size=256,
            sweep_length=8,
            sweep_loop_heads=2,
            real_map_length=32,
            real_map_layers=(0, 1),
        )
        config.streaming.update(
            length=256,
            heads=2,
            kv_heads=1,
            repeats=1,
            chunk_size=64,
            query_chunk_size=32,
            window=16,
            memory_lengths=(128, 256),
            memory_heads=2,
            spectra_lengths=(64, 128),
            spectra_iterations=4,
            spectra_dense_max=64,
        )
    elif arg not in (None, ""):
        raise ValueError(f"unknown config variant {arg!r}; valid: '' (default) or 'smoke'")
    return config
