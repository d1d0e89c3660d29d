// The replica check for silent data corruption (issue 34, item 3) and its test fault. Every
// guard.sdc_every_steps steps (and before every disk checkpoint), after the optimizer step,
// each rank hashes its fp32 master shard; one all-gather on the control group (Gloo, CPU
// tensors: a few bytes per rank) gives every rank every hash, and every rank reaches the same
// verdict (train/verdicts/sdc_verdict.h), so a mismatch ends every rank alike. The header is
// LibTorch-free.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/env.h"
#include "core/status.h"
#include "records/exit_codes.h"
#include "records/launch_context.h"
#include "train/verdicts/sdc_verdict.h"

namespace ftrain::fsdp {
class FsdpEngine;
}
namespace ftrain::comm {
class Comm;
}

namespace ftrain::train {

// The trainer exits kExitSdc (records/exit_codes.h) when replicas disagree: the step's state
// is not trusted, nothing newer is saved, and the job restarts from the newest checkpoint.
using ftrain::kExitSdc;

// A 64-bit digest of this rank's fp32 master shard. CPU: XXH3-64 streamed over the shard's
// bytes (no copy). GPU: a sum over elements of an odd multiple of (bits xor a position key),
// on the device, read back with the one host synchronisation of the check; any single changed
// element changes it. Deterministic: replicas holding the same bits get the same digest.
uint64_t MasterDigest(const fsdp::FsdpEngine& engine);

// The bitflip fault (FTRAIN_FAULT=bitflip@STEP[:RANK]; testing only): flips bit 20 of the
// middle element of this rank's first non-empty fp32 master piece. Returns what it flipped.
std::string FlipMasterBit(fsdp::FsdpEngine& engine);

// Which replica set this rank's shard belongs to, for the verdict: its rank in the shard
// group (hybrid_shard: the local rank; no_shard: 0, every rank holds everything).
struct ReplicaPlace {
  int rank = 0;
  int shard = 0;
  int node = 0;
};

// Collective over `control` (every rank calls it at the same step): gathers every rank's
// digest and place and judges them against `hosts` (rank -> host).
StatusOr<SdcVerdict> CheckReplicas(const fsdp::FsdpEngine& engine, comm::Comm& control,
                                   const ReplicaPlace& me, const std::vector<std::string>& hosts);

// After a mismatch at `step` (rank 0 only): a "sdc" record in restarts.jsonl (through its
// spool under `ftrain job`) and one line per suspect in RUN/quarantine.jsonl.
Status RecordSdc(const std::string& run_dir, const records::LaunchContext& launch, int64_t step,
                 const SdcVerdict& v, Env* env);

}  // namespace ftrain::train
