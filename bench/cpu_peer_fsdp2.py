#!/usr/bin/env python3
"""The peer ftrain's CPU step is measured against: PyTorch FSDP2 (fully_shard per decoder layer
and on the root, bf16 parameters and reduction) over Hugging Face transformers'
LlamaForCausalLM, AdamW, SDPA attention, activation checkpointing of whole layers, Gloo, one
intra-op thread per rank: what bench/fsdp_peer_bench.sh runs ftrain's fsdp_worker with. The
shapes come from an ftrain model config. Prints one JSON line (rank 0): the step time of every
step, warm-up included.

Not ftrain code: a reference point, run in the same bench as ftrain's numbers."""
import argparse
import configparser
import json
import os
import time


def run(rank, a):
    import torch
    import torch.distributed as dist
    import transformers
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(a.port)
    dist.init_process_group("gloo", rank=rank, world_size=a.nproc)
    torch.set_num_threads(1)
    torch.manual_seed(0)
    c = configparser.ConfigParser(inline_comment_prefixes=("#",))
    c.read(a.config)
    m = c["model"]
    cfg = transformers.LlamaConfig(
        vocab_size=int(m["vocab_size"]), hidden_size=int(m["hidden_size"]),
        intermediate_size=int(m["intermediate_size"]), num_hidden_layers=int(m["num_layers"]),
        num_attention_heads=int(m["num_heads"]),
        num_key_value_heads=int(m.get("num_kv_heads", m["num_heads"])),
        max_position_embeddings=max(a.seq, int(m.get("max_seq_len", a.seq))),
        tie_word_embeddings=m.get("tie_embeddings", "false") == "true",
        attn_implementation="sdpa")
    model = transformers.LlamaForCausalLM(cfg)
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.bfloat16)
    for layer in model.model.layers:
        fully_shard(layer, mp_policy=mp)
    fully_shard(model, mp_policy=mp)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    g = torch.Generator().manual_seed(1 + rank)
    times = []
    for _ in range(a.steps):
        t0 = time.perf_counter()
        ids = torch.randint(0, cfg.vocab_size, (a.micro_batch, a.seq), generator=g)
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        times.append(time.perf_counter() - t0)
    if rank == 0:
        print(json.dumps({"step_time_s": times}), flush=True)
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--config", required=True)
    p.add_argument("--nproc", type=int, default=2)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--micro-batch", type=int, default=1)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--port", type=int, default=29541)
    a = p.parse_args()
    import torch.multiprocessing as mp
    mp.spawn(run, args=(a,), nprocs=a.nproc)


if __name__ == "__main__":
    main()
