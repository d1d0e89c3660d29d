// commcheck: correctness and bandwidth of every collective on known data.
#include "comm/commcheck.h"

#include <torch/torch.h>

#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "core/config.h"
#include "core/env.h"
#include "core/log.h"

namespace ftrain::comm {
namespace {

// The device of every tensor the check hands to a collective (set once by RunCommcheck).
torch::TensorOptions F32(const torch::Device& device) {
  return torch::TensorOptions().dtype(torch::kFloat32).device(device);
}

// Rank r's input value at global index i: small integers, so float32 sums are exact.
at::Tensor Pattern(int rank, int64_t offset, int64_t n, const torch::Device& device) {
  auto idx = torch::arange(offset, offset + n, torch::TensorOptions(torch::kInt64).device(device));
  return ((idx.remainder(13) + 1) * (rank + 1)).remainder(97).to(torch::kFloat32);
}

at::Tensor SumPattern(int world, int64_t offset, int64_t n, const torch::Device& device) {
  at::Tensor acc = torch::zeros({n}, F32(device));
  for (int r = 0; r < world; ++r) acc += Pattern(r, offset, n, device);
  return acc;
}

// busbw = algbw * factor (the nccl-tests convention): the bytes each link really carries.
double BusFactor(const std::string& coll, int n) {
  if (n <= 1) return 0.0;
  if (coll == "all_reduce") return 2.0 * (n - 1) / n;
  if (coll == "broadcast") return 1.0;
  return 1.0 * (n - 1) / n;  // all_gather, reduce_scatter
}

// Runs one collective once into fresh buffers and returns (result, expected).
std::pair<at::Tensor, at::Tensor> RunOnce(Comm& comm, const std::string& coll, int64_t n,
                                          const torch::Device& device, Status* status) {
  const int r = comm.rank(), w = comm.size();
  if (coll == "all_reduce") {
    at::Tensor t = Pattern(r, 0, n, device);
    *status = comm.AllReduce(t, ReduceOp::kSum)->Wait();
    return {t, SumPattern(w, 0, n, device)};
  }
  if (coll == "all_gather") {
    ShardSpan s = ShardOf(n, w, r);
    at::Tensor out = torch::full({n}, -1.0f, F32(device));
    *status = comm.AllGather(out, Pattern(r, s.offset, s.length, device))->Wait();
    at::Tensor expect = torch::empty({n}, F32(device));
    for (int q = 0; q < w; ++q) {
      ShardSpan sq = ShardOf(n, w, q);
      if (sq.length > 0) {
        expect.narrow(0, sq.offset, sq.length).copy_(Pattern(q, sq.offset, sq.length, device));
      }
    }
    return {out, expect};
  }
  if (coll == "reduce_scatter") {
    ShardSpan s = ShardOf(n, w, r);
    at::Tensor out = torch::full({s.length}, -1.0f, F32(device));
    *status = comm.ReduceScatter(out, Pattern(r, 0, n, device), ReduceOp::kSum)->Wait();
    return {out, SumPattern(w, s.offset, s.length, device)};
  }
  // broadcast from the last rank, so a non-zero root is exercised
  const int root = w - 1;
  at::Tensor t = r == root ? Pattern(root, 0, n, device) : torch::full({n}, -1.0f, F32(device));
  *status = comm.Broadcast(t, root)->Wait();
  return {t, Pattern(root, 0, n, device)};
}

std::string FormatBytes(int64_t b) {
  char buf[32];
  if (b >= (1LL << 30) && b % (1LL << 30) == 0)
    std::snprintf(buf, sizeof(buf), "%lldG", (long long)(b >> 30));
  else if (b >= (1LL << 20) && b % (1LL << 20) == 0)
    std::snprintf(buf, sizeof(buf), "%lldM", (long long)(b >> 20));
  else if (b >= 1024 && b % 1024 == 0)
    std::snprintf(buf, sizeof(buf), "%lldK", (long long)(b >> 10));
  else
    std::snprintf(buf, sizeof(buf), "%lldB", (long long)b);
  return buf;
}

// Agrees on failures: returns the ranks whose local check failed (same on every rank).
StatusOr<std::vector<int>> FailedRanks(Comm& comm, bool local_bad, const torch::Device& device) {
  at::Tensor flags = torch::zeros({comm.size()}, torch::kFloat32);
  flags[comm.rank()] = local_bad ? 1.0f : 0.0f;
  flags = flags.to(device);
  FT_RETURN_IF_ERROR(comm.AllReduce(flags, ReduceOp::kSum)->Wait());
  flags = flags.cpu();
  std::vector<int> bad;
  for (int q = 0; q < comm.size(); ++q) {
    if (flags[q].item<float>() != 0.0f) bad.push_back(q);
  }
  return bad;
}

}  // namespace

bool ParseByteSize(const std::string& text, int64_t* out) {
  if (text.empty()) return false;
  int64_t mult = 1;
  std::string num = text;
  char last = static_cast<char>(std::toupper(static_cast<unsigned char>(text.back())));
  if (last == 'K' || last == 'M' || last == 'G' || last == 'B') {
    num = text.substr(0, text.size() - 1);
    mult = last == 'K' ? 1024 : last == 'M' ? (1 << 20) : last == 'G' ? (1 << 30) : 1;
  }
  int64_t v;
  if (!ParseInt64(num, &v) || v <= 0) return false;
  *out = v * mult;
  return true;
}

namespace {

StatusOr<torch::Device> ParseDevice(const std::string& text) {
  try {
    return torch::Device(text);
  } catch (const c10::Error&) {
    return Status::InvalidArgument("commcheck device '" + text +
                                   "' is not a device like cpu or cuda:0");
  }
}

// --inject-fault RANK:COLLECTIVE (empty: none; rank -1).
struct Fault {
  int rank = -1;
  std::string collective;
};
StatusOr<Fault> ParseFault(const std::string& text) {
  Fault f;
  if (text.empty()) return f;
  size_t colon = text.find(':');
  int64_t fr;
  if (colon == std::string::npos || !ParseInt64(text.substr(0, colon), &fr)) {
    return Status::InvalidArgument("--inject-fault wants RANK:COLLECTIVE, got '" + text + "'");
  }
  f.rank = static_cast<int>(fr);
  f.collective = text.substr(colon + 1);
  return f;
}

void PrintHeader(DistContext& ctx, const CommcheckOptions& options, const torch::Device& device,
                 std::ostream& out) {
  const WorldInfo& world = ctx.world();
  out << "# ftrain commcheck: " << world.world_size << " ranks on " << world.num_nodes
      << " node(s), backend " << ctx.world_comm().backend() << ", float32 on " << device.str()
      << ", " << options.iters << " iterations (slowest rank)\n";
  char hdr[160];
  std::snprintf(hdr, sizeof(hdr), "%-15s %-11s %10s %12s %12s %12s  %s\n", "collective", "group",
                "size", "time_us", "algbw_GB/s", "busbw_GB/s", "check");
  out << hdr << std::flush;
}

// One checked run of `coll` with `n` elements on every rank; a wrong element anywhere fails
// the check on every rank, naming the ranks.
Status CheckCollective(DistContext& ctx, Comm& comm, const std::string& group_name,
                       const std::string& coll, int64_t bytes, int64_t n,
                       const torch::Device& device, const Fault& fault) {
  const WorldInfo& world = ctx.world();
  Status st;
  auto [got, expect] = RunOnce(comm, coll, n, device, &st);
  if (!st.ok()) return st;
  if (world.rank == fault.rank && coll == fault.collective && group_name == "world" &&
      got.numel() > 0) {
    got[got.numel() / 2] += 1.0f;
  }
  bool local_bad = !torch::equal(got, expect);
  if (local_bad) {
    auto diff = (got - expect).abs().nonzero();
    int64_t where = diff.numel() > 0 ? diff[0][0].item<int64_t>() : -1;
    FT_LOG(Error) << "commcheck: rank " << world.rank << ": " << coll << " on group " << group_name
                  << " with " << n << " float32 elements: element " << where << " = "
                  << (where >= 0 ? got[where].item<float>() : 0.0f) << ", expected "
                  << (where >= 0 ? expect[where].item<float>() : 0.0f);
  }
  FT_ASSIGN_OR_RETURN(std::vector<int> bad, FailedRanks(ctx.world_comm(), local_bad, device));
  if (!bad.empty()) {
    std::string list;
    for (int q : bad) list += (list.empty() ? "" : ",") + std::to_string(q);
    return Status::Corruption("commcheck FAILED: " + coll + " on group " + group_name + " (" +
                              FormatBytes(bytes) + ") gave wrong results on rank(s) " + list +
                              "; see those ranks' log lines for the element");
  }
  return Status::Ok();
}

// Warm-up, then `iters` back to back: the slowest rank's mean seconds per iteration.
StatusOr<double> TimeCollective(DistContext& ctx, Comm& comm, const std::string& coll, int64_t n,
                                const torch::Device& device, const CommcheckOptions& options) {
  Status st;
  for (int i = 0; i < options.warmup; ++i) {
    RunOnce(comm, coll, n, device, &st);
    if (!st.ok()) return st;
  }
  at::Tensor buf = Pattern(comm.rank(), 0, n, device);
  ShardSpan s = ShardOf(n, comm.size(), comm.rank());
  at::Tensor shard = buf.narrow(0, s.offset, s.length).clone();
  at::Tensor full = torch::empty({n}, F32(device));
  FT_RETURN_IF_ERROR(comm.Barrier()->Wait());
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < options.iters; ++i) {
    std::unique_ptr<Work> work;
    if (coll == "all_reduce")
      work = comm.AllReduce(buf, ReduceOp::kSum);
    else if (coll == "all_gather")
      work = comm.AllGather(full, shard);
    else if (coll == "reduce_scatter")
      work = comm.ReduceScatter(shard, buf, ReduceOp::kSum);
    else
      work = comm.Broadcast(buf, comm.size() - 1);
    FT_RETURN_IF_ERROR(work->Wait());
  }
  double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() /
                   std::max(1, options.iters);
  at::Tensor t = torch::full({1}, elapsed, torch::TensorOptions(torch::kFloat64).device(device));
  FT_RETURN_IF_ERROR(ctx.world_comm().AllReduce(t, ReduceOp::kMax)->Wait());
  return t.item<double>();
}

// Rank 0's JSON row for one result, and its table line unless --json.
void ReportRow(const CommcheckRow& row, int group_size, const CommcheckOptions& options,
               std::ostream& out, nlohmann::json* json_rows) {
  json_rows->push_back({{"collective", row.collective},
                        {"group", row.group},
                        {"group_size", group_size},
                        {"bytes", row.bytes},
                        {"time_s", row.time_s},
                        {"algbw_gbps", row.algbw_gbps},
                        {"busbw_gbps", row.busbw_gbps},
                        {"ok", true}});
  if (options.json) return;
  char line[200];
  std::snprintf(line, sizeof(line), "%-15s %-11s %10s %12.1f %12.3f %12.3f  ok\n",
                row.collective.c_str(), row.group.c_str(), FormatBytes(row.bytes).c_str(),
                row.time_s * 1e6, row.algbw_gbps, row.busbw_gbps);
  out << line << std::flush;
}

// Barrier latency, a quick sanity figure for the interconnect, and rank 0's closing lines.
// The record is written before the closing "commcheck: OK": a failure to write it lands in
// *record_error (the collectives were fine, so it is not the check's failure).
Status Finish(DistContext& ctx, const CommcheckOptions& options, std::ostream& out,
              const nlohmann::json& json_rows, Status* record_error) {
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 10; ++i) FT_RETURN_IF_ERROR(ctx.world_comm().Barrier()->Wait());
  double barrier_us =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / 10 * 1e6;
  const WorldInfo& world = ctx.world();
  if (world.rank != 0) return Status::Ok();
  nlohmann::json doc = {
      {"world_size", world.world_size},
      {"num_nodes", world.num_nodes},
      {"backend", ctx.world_comm().backend()},
      {"ok", true},
      {"time",
       std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count()},
      {"barrier_us", barrier_us},
      {"results", json_rows}};
  if (!options.record_path.empty()) {
    Status w = WriteFileDurably(options.env, options.record_path, doc.dump() + "\n");
    if (!w.ok()) {
      const std::string what = "commcheck: the collectives passed, but rank 0 cannot write";
      *record_error =
          Status(w.code(), what + " the record " + options.record_path + ": " + w.message());
    }
  }
  if (options.json) {
    out << doc.dump() << "\n";
  } else {
    char line[120];
    std::snprintf(line, sizeof(line), "barrier latency %.1f us\ncommcheck: OK%s\n", barrier_us,
                  record_error->ok() ? "" : " (record NOT written)");
    out << line;
  }
  out.flush();
  return Status::Ok();
}

}  // namespace

Status RunCommcheck(DistContext& ctx, const CommcheckOptions& options, std::ostream& out,
                    std::vector<CommcheckRow>* rows, Status* record_error) {
  *record_error = Status::Ok();
  if (!options.record_path.empty() && options.env == nullptr) {
    return Status::InvalidArgument("CommcheckOptions.env is not set (it writes record_path)");
  }
  torch::NoGradGuard no_grad;
  FT_ASSIGN_OR_RETURN(const torch::Device device, ParseDevice(options.device));
  FT_ASSIGN_OR_RETURN(const Fault fault, ParseFault(options.inject_fault));
  const std::vector<std::string> collectives = {"all_reduce", "all_gather", "reduce_scatter",
                                                "broadcast"};
  std::vector<std::pair<std::string, Comm*>> groups = {{"world", &ctx.world_comm()}};
  if (options.check_groups) {
    groups.push_back({"intra_node", &ctx.intra_node()});
    groups.push_back({"inter_node", &ctx.inter_node()});
  }
  const bool leader = ctx.world().rank == 0;
  nlohmann::json json_rows = nlohmann::json::array();
  if (leader && !options.json) PrintHeader(ctx, options, device, out);
  for (const auto& [group_name, comm] : groups) {
    // Sub-groups get one small correctness pass; the world group gets every size.
    std::vector<int64_t> sizes = options.sizes_bytes;
    if (group_name != "world") sizes = {std::min<int64_t>(sizes.front(), 1 << 20)};
    for (const std::string& coll : collectives) {
      for (int64_t bytes : sizes) {
        const int64_t n = std::max<int64_t>(1, bytes / 4);
        FT_RETURN_IF_ERROR(CheckCollective(ctx, *comm, group_name, coll, bytes, n, device, fault));
        FT_ASSIGN_OR_RETURN(const double elapsed,
                            TimeCollective(ctx, *comm, coll, n, device, options));
        CommcheckRow row;
        row.collective = coll;
        row.group = group_name;
        row.bytes = n * 4;
        row.time_s = elapsed;
        row.algbw_gbps = elapsed > 0 ? row.bytes / elapsed / 1e9 : 0;
        row.busbw_gbps = row.algbw_gbps * BusFactor(coll, comm->size());
        if (rows) rows->push_back(row);
        if (leader) ReportRow(row, comm->size(), options, out, &json_rows);
      }
    }
  }
  return Finish(ctx, options, out, json_rows, record_error);
}

}  // namespace ftrain::comm
