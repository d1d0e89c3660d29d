// The fixed point of dist.reduce = exact (docs/design.md, "Exact reduction"): gradients as
// integer digits in two bins of kBinBits bits at absolute, block-wide positions, so that sums
// over micro-batches and ranks are integer sums (exact, in any order, over any grouping).
// A value x of block b with top bin T has digits top = rint(x / 2^(T W)) and
// low = rint((x - top 2^(T W)) / 2^((T-1) W)); both depend only on x and T, and T is the
// largest bin any value of the block needs (an all-reduce MAX: order-free too). Bins below the
// lowest kept one are dropped, the same way whichever group held them: that is the only loss.
// Pure tensor arithmetic; no communication here (the engine does it).
#pragma once

#include <torch/torch.h>

#include <cstdint>

namespace ftrain::fsdp::exact {

// Elements per block, in a unit's flat (global) parameter index space.
inline constexpr int64_t kBlock = 4096;
// Bits per bin: a digit is at most 2^(W-1) in magnitude, so the sum of kMaxAddends of them
// (micro-batches of a step) stays below 2^53: exact in an int64 and in a float64. Two bins keep
// between W and 2W bits below a block's largest value.
inline constexpr int kBinBits = 40;
inline constexpr int64_t kMaxAddends = int64_t{1} << (53 - kBinBits);
// The top bin of an all-zero block (below any fp32 value's) and of one holding inf or NaN.
inline constexpr int64_t kZeroBin = -8;
inline constexpr int64_t kNonFiniteBin = 100;

inline int64_t Blocks(int64_t numel) { return (numel + kBlock - 1) / kBlock; }

// Top bins of the blocks of `flat` (fp32, [numel]): int64 [Blocks(numel)] on flat's device.
torch::Tensor TopBins(const torch::Tensor& flat);

// The two digits of every element of `flat` (fp32 [numel]) under top bins `bins` (int64
// [Blocks(numel)], finite): int64 tensors [numel] each.
struct Digits {
  torch::Tensor top, low;
};
Digits ToDigits(const torch::Tensor& flat, const torch::Tensor& bins);

// The elements [offset, offset + length) of a unit's flat index space: which blocks they lie
// in (first_block, counts per block), to spread per-block values over them.
struct ShardBlocks {
  int64_t first_block = 0;
  torch::Tensor counts;  // int64 [blocks touched], on the CPU
  int64_t length = 0;
};
ShardBlocks BlocksOf(int64_t offset, int64_t length);

// Adds digits (`in_top`, `in_low`, under per-block bins `in_bins`) into an accumulator
// (`top`, `low`, under `bins`) over the same shard: both move to the larger bin per block
// (a bin that falls off the bottom is dropped), then add. `bins` is updated.
void Accumulate(torch::Tensor& top, torch::Tensor& low, torch::Tensor& bins,
                const torch::Tensor& in_top, const torch::Tensor& in_low,
                const torch::Tensor& in_bins, const ShardBlocks& shard);

// The accumulated value of every element divided by `divisor`, rounded to fp32, into `out`.
void ToFloat(const torch::Tensor& top, const torch::Tensor& low, const torch::Tensor& bins,
             const ShardBlocks& shard, double divisor, torch::Tensor& out);

// Sum of rint(g^2 2^scale) over fp32 `g` as an int64 scalar tensor (exact: g^2 is exact in
// float64, scaled by a power of two, rounded, summed as integers).
torch::Tensor FixedSumOfSquares(const torch::Tensor& g, int scale);

// The power of two such that `count` addends of at most `max_value` sum below 2^62.
int ScaleFor(double max_value, int64_t count);

}  // namespace ftrain::fsdp::exact
