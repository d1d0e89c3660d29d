// The fixed point of dist.reduce = exact (fsdp/exact.h) in-process: the accumulated digits of
// the same values are bit-identical however they are grouped and ordered (as micro-batches
// spread over different numbers of ranks would be), the mean is within the documented bound of
// an fp64 reference, and inf/NaN give the non-finite bin.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "fsdp/exact.h"

namespace ftrain::fsdp::exact {
namespace {

// `count` fp32 gradients of `n` elements with magnitudes spread over 2^-60..2^4, some zeros,
// and blocks whose values move one and two bins up between micro-batches.
std::vector<torch::Tensor> Values(int count, int64_t n) {
  torch::manual_seed(7);
  std::vector<torch::Tensor> out;
  for (int i = 0; i < count; ++i) {
    torch::Tensor mag = torch::pow(2.0, torch::randint(-60, 5, {n}, torch::kFloat64));
    torch::Tensor v = (torch::randn({n}, torch::kFloat64) * mag).to(torch::kFloat32);
    v.narrow(0, 0, 100).zero_();
    // Block 1: one micro-batch in a bin above the others' (2^39 vs 2^-1).
    v.narrow(0, kBlock, 10).fill_(i == 3 ? std::ldexp(1.0f, 39) : 0.5f);
    // Block 2 (when there is one): two bins above (2^79 vs 2^-2): the others' digits drop out.
    if (n >= 2 * kBlock + 10) {
      v.narrow(0, 2 * kBlock, 10).fill_(i == 5 % count ? std::ldexp(1.0f, 79) : 0.25f);
    }
    out.push_back(v);
  }
  return out;
}

// The mean of `values` accumulated in slots of `group` (each slot under its own MAX'd bins).
torch::Tensor Mean(const std::vector<torch::Tensor>& values, const std::vector<int>& order,
                   int group, const ShardBlocks& shard) {
  torch::Tensor top, low, bins;
  for (size_t i = 0; i < order.size(); i += static_cast<size_t>(group)) {
    const size_t end = std::min(order.size(), i + static_cast<size_t>(group));
    torch::Tensor slot = TopBins(values[static_cast<size_t>(order[i])]);
    for (size_t j = i + 1; j < end; ++j) {
      slot = torch::maximum(slot, TopBins(values[static_cast<size_t>(order[j])]));
    }
    for (size_t j = i; j < end; ++j) {
      Digits d = ToDigits(values[static_cast<size_t>(order[j])], slot);
      if (!top.defined()) {
        top = d.top.clone();
        low = d.low.clone();
        bins = slot.clone();
      } else {
        Accumulate(top, low, bins, d.top, d.low, slot, shard);
      }
    }
  }
  torch::Tensor out = torch::empty({shard.length}, torch::kFloat32);
  ToFloat(top, low, bins, shard, static_cast<double>(values.size()), out);
  return out;
}

TEST(FsdpExact, SumsAreBitIdenticalForAnyGroupingAndOrder) {
  const int64_t n = 3 * kBlock + 123;  // a partial last block
  const std::vector<torch::Tensor> values = Values(7, n);
  const ShardBlocks whole = BlocksOf(0, n);
  std::vector<int> order(values.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int>(i);
  const torch::Tensor a = Mean(values, order, 1, whole);
  std::mt19937 rng(3);
  for (int group : {2, 3, 7}) {
    std::shuffle(order.begin(), order.end(), rng);
    const torch::Tensor b = Mean(values, order, group, whole);
    EXPECT_TRUE(torch::equal(a, b)) << "group " << group;
  }
  // The fp32 sum in another order is not (the control: the values do exercise rounding).
  torch::Tensor f1 = torch::zeros({n}), f2 = torch::zeros({n});
  for (size_t i = 0; i < values.size(); ++i) f1 += values[i];
  for (size_t i = values.size(); i-- > 0;) f2 += values[i];
  EXPECT_FALSE(torch::equal(f1, f2));
}

TEST(FsdpExact, MeanIsWithinTwoToTheMinus40OfTheBlockMaxOfAnFp64Reference) {
  const int64_t n = 2 * kBlock;
  const std::vector<torch::Tensor> values = Values(5, n);
  std::vector<int> order{0, 1, 2, 3, 4};
  const torch::Tensor got = Mean(values, order, 2, BlocksOf(0, n)).to(torch::kFloat64);
  torch::Tensor ref = torch::zeros({n}, torch::kFloat64);
  for (const auto& v : values) ref += v.to(torch::kFloat64);
  ref /= 5.0;
  const torch::Tensor err = (got - ref).abs().view({2, kBlock});
  const torch::Tensor block_max = ref.abs().view({2, kBlock}).amax(1, true);
  torch::Tensor addend_max = torch::zeros({2, 1}, torch::kFloat64);
  for (const auto& v : values) {
    addend_max =
        torch::maximum(addend_max, v.to(torch::kFloat64).abs().view({2, kBlock}).amax(1, true));
  }
  // The fixed point's own error (2^-40 of the block's largest addend) plus the final rounding
  // to fp32 (2^-24 of the element).
  const torch::Tensor bound =
      addend_max * std::ldexp(1.0, -40) + ref.abs().view({2, kBlock}) * std::ldexp(1.0, -24);
  EXPECT_TRUE(err.le(bound).all().item<bool>()) << (err - bound).max().item<double>();
  // Elements within 2^-16 of their block's largest keep fp32 precision.
  const torch::Tensor near = ref.abs().view({2, kBlock}).ge(block_max * std::ldexp(1.0, -16));
  const torch::Tensor rel = err / ref.abs().view({2, kBlock}).clamp_min(1e-300);
  EXPECT_LE(rel.masked_select(near).max().item<double>(), std::ldexp(1.0, -23));
}

TEST(FsdpExact, AShardAccumulatesWhatTheWholeUnitDoes) {
  const int64_t n = 3 * kBlock;
  const std::vector<torch::Tensor> values = Values(4, n);
  std::vector<int> order{0, 1, 2, 3};
  const torch::Tensor whole = Mean(values, order, 1, BlocksOf(0, n));
  // The shard [kBlock / 2, 2 kBlock + 7): its digits are the whole unit's, narrowed.
  const int64_t off = kBlock / 2, len = 3 * kBlock / 2 + 7;
  const ShardBlocks shard = BlocksOf(off, len);
  torch::Tensor top, low, bins;
  for (const auto& v : values) {
    const torch::Tensor b = TopBins(v);
    Digits d = ToDigits(v, b);
    torch::Tensor t = d.top.narrow(0, off, len).clone(), l = d.low.narrow(0, off, len).clone();
    if (!top.defined()) {
      top = t;
      low = l;
      bins = b.clone();
    } else {
      Accumulate(top, low, bins, t, l, b, shard);
    }
  }
  torch::Tensor out = torch::empty({len}, torch::kFloat32);
  ToFloat(top, low, bins, shard, 4.0, out);
  EXPECT_TRUE(torch::equal(out, whole.narrow(0, off, len)));
}

TEST(FsdpExact, InfAndNanGetTheNonFiniteBinAndZerosTheZeroBin) {
  torch::Tensor v = torch::ones({2 * kBlock + 1});
  v[5] = std::numeric_limits<float>::infinity();
  v[kBlock + 5] = std::numeric_limits<float>::quiet_NaN();
  v.narrow(0, 2 * kBlock, 1).zero_();
  const torch::Tensor bins = TopBins(v);
  EXPECT_EQ(bins[0].item<int64_t>(), kNonFiniteBin);
  EXPECT_EQ(bins[1].item<int64_t>(), kNonFiniteBin);
  EXPECT_EQ(bins[2].item<int64_t>(), kZeroBin);
}

}  // namespace
}  // namespace ftrain::fsdp::exact
