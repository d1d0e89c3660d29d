// Fixed-point digits for dist.reduce = exact. Every operation is exact or a deterministic
// function of its inputs: scaling by powers of two (computed with std::ldexp on the host,
// never with pow), rint (half to even), integer adds, and one rounding chain at the end.
#include "fsdp/exact.h"

#include <cmath>
#include <vector>

namespace ftrain::fsdp::exact {
namespace {

// 2^(shift + bins[b] * kBinBits) per block, as float64 on `device`.
torch::Tensor PowersOfTwo(const torch::Tensor& bins, int64_t times, int64_t shift,
                          const torch::Device& device) {
  const torch::Tensor host = bins.to(torch::kCPU).contiguous();
  const int64_t* b = host.data_ptr<int64_t>();
  std::vector<double> v(static_cast<size_t>(host.numel()));
  for (size_t i = 0; i < v.size(); ++i) {
    v[i] = std::ldexp(1.0, static_cast<int>(times * (b[i] + shift) * kBinBits));
  }
  return torch::tensor(v, torch::kFloat64).to(device);
}

// `flat` zero-padded to whole blocks, as [blocks, kBlock].
torch::Tensor Padded(const torch::Tensor& flat) {
  const int64_t n = flat.numel();
  const int64_t padded = Blocks(n) * kBlock;
  torch::Tensor p = padded == n ? flat : torch::constant_pad_nd(flat, {0, padded - n}, 0);
  return p.view({Blocks(n), kBlock});
}

// Per-block values spread over the elements of `shard`.
torch::Tensor Spread(const torch::Tensor& per_block, const ShardBlocks& shard) {
  if (shard.length == 0) return torch::empty({0}, per_block.options());
  return per_block.narrow(0, shard.first_block, shard.counts.numel())
      .repeat_interleave(shard.counts.to(per_block.device()), 0, shard.length);
}

// Digits under bins raised by `d` (per element): d = 0 keeps them, d = 1 moves the top digit
// down and drops the low one, d >= 2 drops both.
void Raise(torch::Tensor& top, torch::Tensor& low, const torch::Tensor& d) {
  const torch::Tensor same = d.eq(0), one = d.eq(1);
  low = low * same + top * one;
  top = top * same;
}

}  // namespace

torch::Tensor TopBins(const torch::Tensor& flat) {
  torch::NoGradGuard no_grad;
  if (flat.numel() == 0) return torch::empty({0}, flat.options().dtype(torch::kInt64));
  const torch::Tensor m = Padded(flat.to(torch::kFloat32)).abs().amax(1);
  // m in [2^(e-1), 2^e): the top bin T = floor(e / W) is the smallest with m < 2^((T+1)W - 1),
  // so that every digit of the block is at most 2^(W-1) in magnitude.
  auto [mantissa, exponent] = torch::frexp(m);
  (void)mantissa;  // only the exponent decides the bin
  torch::Tensor bins = exponent.to(torch::kInt64).div(kBinBits, "floor");
  bins.masked_fill_(m.eq(0), kZeroBin);
  bins.masked_fill_(torch::isfinite(m).logical_not(), kNonFiniteBin);
  return bins;
}

Digits ToDigits(const torch::Tensor& flat, const torch::Tensor& bins) {
  torch::NoGradGuard no_grad;
  const int64_t n = flat.numel();
  if (n == 0) {
    torch::Tensor z = torch::empty({0}, flat.options().dtype(torch::kInt64));
    return {z, z.clone()};
  }
  const torch::Device dev = flat.device();
  const torch::Tensor x = Padded(flat.to(torch::kFloat64));
  const torch::Tensor inv_top = PowersOfTwo(bins, -1, 0, dev).unsqueeze(1);
  const torch::Tensor unit_top = PowersOfTwo(bins, 1, 0, dev).unsqueeze(1);
  const torch::Tensor inv_low = PowersOfTwo(bins, -1, -1, dev).unsqueeze(1);
  const torch::Tensor top = (x * inv_top).round_();
  // Exact: top * 2^(TW) is a multiple of the bin unit, and x minus it is at most half a unit,
  // on the grid of x's own last bit.
  const torch::Tensor rest = x - top * unit_top;
  const torch::Tensor low = (rest * inv_low).round_();
  return {top.to(torch::kInt64).view(-1).narrow(0, 0, n),
          low.to(torch::kInt64).view(-1).narrow(0, 0, n)};
}

ShardBlocks BlocksOf(int64_t offset, int64_t length) {
  ShardBlocks s;
  s.length = length;
  if (length == 0) {
    s.counts = torch::empty({0}, torch::kInt64);
    return s;
  }
  s.first_block = offset / kBlock;
  const int64_t last = (offset + length - 1) / kBlock;
  std::vector<int64_t> counts;
  for (int64_t b = s.first_block; b <= last; ++b) {
    const int64_t lo = std::max(offset, b * kBlock);
    const int64_t hi = std::min(offset + length, (b + 1) * kBlock);
    counts.push_back(hi - lo);
  }
  s.counts = torch::tensor(counts, torch::kInt64);
  return s;
}

void Accumulate(torch::Tensor& top, torch::Tensor& low, torch::Tensor& bins,
                const torch::Tensor& in_top, const torch::Tensor& in_low,
                const torch::Tensor& in_bins, const ShardBlocks& shard) {
  torch::NoGradGuard no_grad;
  const torch::Tensor raised = torch::maximum(bins, in_bins);
  torch::Tensor a_top = top, a_low = low, b_top = in_top, b_low = in_low;
  Raise(a_top, a_low, Spread(raised - bins, shard));
  Raise(b_top, b_low, Spread(raised - in_bins, shard));
  top = a_top + b_top;
  low = a_low + b_low;
  bins = raised;
}

void ToFloat(const torch::Tensor& top, const torch::Tensor& low, const torch::Tensor& bins,
             const ShardBlocks& shard, double divisor, torch::Tensor& out) {
  torch::NoGradGuard no_grad;
  if (shard.length == 0) return;
  const torch::Device dev = top.device();
  const torch::Tensor unit_top = Spread(PowersOfTwo(bins, 1, 0, dev), shard);
  const torch::Tensor unit_low = Spread(PowersOfTwo(bins, 1, -1, dev), shard);
  // |top|, |low| <= kMaxAddends 2^(W-1) < 2^53: exact in float64; each product is exact, the
  // sum, the division and the fp32 conversion each round once, the same way on every rank.
  const torch::Tensor v = top.to(torch::kFloat64) * unit_top + low.to(torch::kFloat64) * unit_low;
  out.copy_((v / divisor).to(torch::kFloat32));
}

torch::Tensor FixedSumOfSquares(const torch::Tensor& g, int scale) {
  torch::NoGradGuard no_grad;
  const torch::Tensor x = g.to(torch::kFloat64);
  return (x * x * std::ldexp(1.0, scale)).round_().to(torch::kInt64).sum();
}

int ScaleFor(double max_value, int64_t count) {
  if (!(max_value > 0) || !std::isfinite(max_value)) return 0;
  int e = 0;
  (void)std::frexp(max_value, &e);  // max_value < 2^e
  int log2_count = 0;
  while ((int64_t{1} << log2_count) < count && log2_count < 62) ++log2_count;
  return 62 - log2_count - e;
}

}  // namespace ftrain::fsdp::exact
