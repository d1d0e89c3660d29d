// `ftrain commcheck`: the health check users run before a long job (like nccl-tests).
// Every rank runs each collective on known data, checks the result element by element, and
// times it; rank 0 prints algorithm and bus bandwidth per collective and size. A mismatch on
// any rank fails the check on every rank, naming the rank and the collective.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "comm/context.h"
#include "core/env.h"
#include "core/status.h"

namespace ftrain::comm {

struct CommcheckOptions {
  std::vector<int64_t> sizes_bytes;  // per collective: the full (gathered/reduced) tensor size
  int warmup = 1;
  int iters = 5;
  bool json = false;
  // Rank 0 also writes the JSON result here (durably: temp file + rename), whether or not it
  // prints the table: the run's record of its link (RUN/commcheck.json, `ftrain report`).
  std::string record_path;
  Env* env = nullptr;        // writes the record (the main's Env); required with record_path
  bool check_groups = true;  // also check the intra-node and inter-node groups
  // Where the test tensors live: "cpu" (Gloo) or "cuda:N" (NCCL needs device memory; needs a
  // LibTorch built with CUDA at run time).
  std::string device = "cpu";
  // Testing aid for the checker itself: "RANK:COLLECTIVE" corrupts one element of that
  // rank's result, so the failure path can be exercised on a healthy machine.
  std::string inject_fault;
};

struct CommcheckRow {
  std::string collective;
  std::string group;
  int64_t bytes = 0;
  double time_s = 0;  // per iteration, the slowest rank
  double algbw_gbps = 0;
  double busbw_gbps = 0;
};

// Runs the check; prints the table (or JSON) on rank 0 to `out`. Corruption on mismatch.
// With options.record_path set, rank 0 then writes the record; if that fails, the return is
// still Ok (the collectives were correct) and *record_error says why, naming the file, so a
// caller can tell an unwritable run directory from a bad link (`ftrain commcheck` exits 3).
Status RunCommcheck(DistContext& ctx, const CommcheckOptions& options, std::ostream& out,
                    std::vector<CommcheckRow>* rows, Status* record_error);

// "1M" -> 1048576, "64K", "4096", "1G"; false on junk or non-positive values.
bool ParseByteSize(const std::string& text, int64_t* out);

}  // namespace ftrain::comm
