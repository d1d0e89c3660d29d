#!/usr/bin/env python3
"""The peer ftrain's GPU step is measured against: PyTorch FSDP2 (fully_shard per decoder layer
and on the root, bf16 parameters, fp32 reduction) over Hugging Face transformers'
LlamaForCausalLM, fused AdamW, SDPA attention, optional activation checkpointing of whole
layers. The same shapes, batch and step structure as an ftrain config (bench/gpu_layers.sh
passes them), on one GPU of the machine it runs on. Prints one JSON line: the median step time
over the timed steps (CUDA events), tokens/s, MFU counted as 6N and as torchtitan counts it
(6 * non-embedding params + 12 * layers * heads * head_dim * seq), and the allocator's peaks.

Not ftrain code: a reference point, run in the same lease as ftrain's numbers."""
import argparse
import json
import os
import statistics


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--hidden", type=int, default=4096)
    p.add_argument("--intermediate", type=int, default=11008)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--heads", type=int, default=32)
    p.add_argument("--kv-heads", type=int, default=32)
    p.add_argument("--vocab", type=int, default=32000)
    p.add_argument("--seq", type=int, default=4096)
    p.add_argument("--micro-batch", type=int, default=2)
    p.add_argument("--grad-accum", type=int, default=2)
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--act-ckpt", type=int, default=1)
    p.add_argument("--deterministic", type=int, default=0)
    p.add_argument("--peak-tflops", type=float, default=989.0)
    a = p.parse_args()

    import torch
    import torch.distributed as dist
    import transformers
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29517")
    dist.init_process_group("nccl", rank=0, world_size=1)
    torch.cuda.set_device(0)
    if a.deterministic:
        os.environ["CUBLAS_WORKSPACE_CONFIG"] = ":4096:8"
        torch.use_deterministic_algorithms(True)
        torch.backends.cuda.matmul.allow_tf32 = False
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(
        vocab_size=a.vocab, hidden_size=a.hidden, intermediate_size=a.intermediate,
        num_hidden_layers=a.layers, num_attention_heads=a.heads, num_key_value_heads=a.kv_heads,
        max_position_embeddings=a.seq, tie_word_embeddings=False, attn_implementation="sdpa")
    with torch.device("cuda"):
        model = transformers.LlamaForCausalLM(cfg)
    if a.act_ckpt:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for layer in model.model.layers:
        fully_shard(layer, mp_policy=mp)
    fully_shard(model, mp_policy=mp)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    nparams = sum(p.numel() for p in model.parameters())
    nembed = model.model.embed_tokens.weight.numel()
    head_dim = a.hidden // a.heads

    g = torch.Generator(device="cuda").manual_seed(1)
    times = []
    torch.cuda.reset_peak_memory_stats()
    for step in range(a.warmup + a.steps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(a.grad_accum):
            ids = torch.randint(0, a.vocab, (a.micro_batch, a.seq), device="cuda", generator=g)
            out = model(input_ids=ids, labels=ids, use_cache=False)  # HF shifts the labels
            (out.loss / a.grad_accum).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        end.record()
        end.synchronize()
        if step >= a.warmup:
            times.append(start.elapsed_time(end) / 1000.0)
    step_s = statistics.median(times)
    tokens = a.micro_batch * a.grad_accum * a.seq
    tps = tokens / step_s
    flops_6n = 6 * nparams
    flops_tt = 6 * (nparams - nembed) + 12 * a.layers * a.heads * head_dim * a.seq
    st = torch.cuda.memory_stats()
    print(json.dumps({
        "peer": f"fsdp2+transformers {transformers.__version__} torch {torch.__version__}",
        "params": nparams, "act_ckpt": a.act_ckpt, "deterministic": a.deterministic,
        "step_s": round(step_s, 5), "tokens_per_s": round(tps, 1),
        "mfu_6n": round(flops_6n * tps / (a.peak_tflops * 1e12), 4),
        "mfu_torchtitan": round(flops_tt * tps / (a.peak_tflops * 1e12), 4),
        "alloc_peak_gib": round(st["allocated_bytes.all.peak"] / 2**30, 3),
        "reserved_peak_gib": round(st["reserved_bytes.all.peak"] / 2**30, 3),
        "alloc_retries": st.get("num_alloc_retries", 0)}))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
