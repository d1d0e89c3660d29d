#!/usr/bin/env python3
"""The reference side of hf_model_test: tiny random models saved by transformers, and their loss.

  hf_reference.py make ARCH OUT_DIR ROWS  save a tiny random ARCH model (fp32 safetensors),
                                          load it back and print {"fp32": ..., "bf16": ...}:
                                          transformers' mean token cross-entropy (eager
                                          attention) on ROWS, a JSON list of token rows (inputs
                                          row[:-1], targets row[1:]), with the model in float32
                                          and in bfloat16 (one process: importing is slow)
  hf_reference.py make-all OUT_DIR ROWS   the same for every architecture, OUT_DIR/ARCH each,
                                          one line {"arch": ARCH, "fp32": ..., "bf16": ...} each
                                          (one import of torch and transformers for all)

Weights are drawn with a large initializer_range (and random biases and norm weights), so
attention is far from uniform and the positions (RoPE scaling, sliding windows) change the
loss. Nothing here uses ftrain: it is the oracle.
"""
import json
import sys

import torch
import transformers

COMMON = dict(
    vocab_size=256,
    hidden_size=64,
    intermediate_size=96,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=128,
    rms_norm_eps=1e-5,
    initializer_range=0.2,
)


ARCHS = ("llama3", "llama_linear", "mistral", "qwen2")


def config(arch):
    if arch == "llama3":  # Llama 3.1: llama3 rope scaling, scaled within the test's 32 positions
        return transformers.LlamaConfig(
            **COMMON,
            rope_theta=500000.0,
            rope_scaling={
                "rope_type": "llama3",
                "factor": 8.0,
                "low_freq_factor": 1.0,
                "high_freq_factor": 4.0,
                "original_max_position_embeddings": 64,
            },
        )
    if arch == "llama_linear":  # linear scaling, head_dim != hidden/heads, biases, tied
        return transformers.LlamaConfig(
            **COMMON,
            head_dim=24,
            attention_bias=True,
            mlp_bias=True,
            tie_word_embeddings=True,
            rope_scaling={"rope_type": "linear", "factor": 4.0},
        )
    if arch == "mistral":  # sliding window 8 < the 32-token rows
        return transformers.MistralConfig(**COMMON, sliding_window=8)
    if arch == "qwen2":  # q/k/v biases; layer 1 slides (max_window_layers = 1)
        return transformers.Qwen2Config(
            **COMMON, use_sliding_window=True, sliding_window=8, max_window_layers=1
        )
    raise SystemExit(f"unknown architecture {arch}")


def make(arch, out):
    torch.manual_seed(1234)
    model = transformers.AutoModelForCausalLM.from_config(config(arch), dtype=torch.float32)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(".bias"):
                p.normal_(0.0, 0.1)
            elif name.endswith("norm.weight"):
                p.normal_(1.0, 0.1)
    model.save_pretrained(out)


def loss(path, rows_file, dtype):
    model = transformers.AutoModelForCausalLM.from_pretrained(
        path, dtype=dtype, attn_implementation="eager"
    )
    model.eval()
    with open(rows_file) as f:
        rows = torch.tensor(json.load(f), dtype=torch.long)
    with torch.no_grad():
        logits = model(input_ids=rows[:, :-1]).logits
    value = torch.nn.functional.cross_entropy(
        logits.float().reshape(-1, logits.size(-1)), rows[:, 1:].reshape(-1)
    )
    return value.item()


def make_and_measure(arch, out, rows_file):
    make(arch, out)
    fp32 = loss(out, rows_file, torch.float32)
    bf16 = loss(out, rows_file, torch.bfloat16)
    return {"fp32": fp32, "bf16": bf16}


def main(argv):
    torch.set_num_threads(1)
    if len(argv) == 4 and argv[0] == "make":
        print(json.dumps(make_and_measure(argv[1], argv[2], argv[3])))
    elif len(argv) == 3 and argv[0] == "make-all":
        for arch in ARCHS:
            result = make_and_measure(arch, f"{argv[1]}/{arch}", argv[2])
            print(json.dumps({"arch": arch, **result}), flush=True)
    else:
        raise SystemExit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
