// `ftrain pack --part I/N` and `ftrain pack merge OUT PARTS...`: one pack spread over N
// processes (an sbatch array, slurm/pack.sh), then joined into the dataset a single pack of
// the same inputs writes, byte for byte, for any N.
//
// The sorted inputs are laid end to end as one byte range of T stored bytes; part I owns
// [T*I/N, T*(I+1)/N). An uncompressed JSON Lines file is split: a part reads the lines that
// start in its range (pread; the lines before are counted so messages keep the file's line
// numbers). A compressed file or a plain-text file (one document whose 64 KiB pieces are cut
// relative to the file's start), or an input named by URL, goes whole to the part whose range
// holds its first byte.
// Every record is so read by exactly one part, in the same pieces as a single pack reads it.
//
// A part writes its document token stream (BOS/EOS included, tokens as the dataset stores
// them) to tokens.bin, its stats, inputs and bad records, the tokenizer, and part.json last
// (the commit). The merge feeds the streams in part order to the single pack's row and shard
// cutter and writes index.json through the same code (pack_steps.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/env.h"
#include "core/status.h"
#include "data/format/index.h"
#include "data/pack/pack.h"

namespace ftrain::data {

inline constexpr char kPartFileName[] = "part.json";
inline constexpr char kPartTokensFileName[] = "tokens.bin";

struct PartId {
  uint32_t index = 0;  // 0-based, < count
  uint32_t count = 0;
  std::string Name() const { return std::to_string(index) + "/" + std::to_string(count); }
};

// "I/N" with 0 <= I < N <= 100000; errors name the flag.
Status ParsePartId(const std::string& text, PartId* out);

struct PartResult {
  bool skipped = false;  // part.json was already there for this pack, and tokens.bin checked out
  uint64_t tokens = 0;
  PackStats stats;
  uint64_t input_bytes = 0;  // stored bytes this part read
  double seconds = 0;
};

// Packs part `part` of the inputs into o.out_dir (a directory of its own). A finished part
// of the same pack there is verified and kept; one of another pack needs o.force.
StatusOr<PartResult> PackPart(const PackOptions& o, PartId part);

struct MergeOptions {
  std::string out_dir;
  std::vector<std::string> parts;  // part directories, any order
  bool force = false;              // replace a packed dataset already in out_dir
  Env* env = nullptr;              // every read, write and directory change; required
};

// Joins finished parts into out_dir. Refuses (FailedPrecondition, nothing written) parts of
// different packs, a missing, repeated or unfinished part.
StatusOr<PackResult> MergeParts(const MergeOptions& m);

}  // namespace ftrain::data
