// "Where the time goes": the per-rank phases of metrics.jsonl read back and judged.
#include "report/time_breakdown.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>

namespace ftrain::report {

namespace {

using json = nlohmann::json;
using ojson = nlohmann::ordered_json;

// Shares above these are named as the problem.
constexpr double kDataBound = 0.10;     // of the step time waiting for data
constexpr double kCommBound = 0.30;     // of the step time waiting on collectives
constexpr double kStallBound = 0.05;    // of the wall time in checkpoint stalls
constexpr double kFailureBound = 0.05;  // of the wall time lost to failures
constexpr double kGpuLowUtil = 80;      // GPU utilisation p50 (%) that points at launch-bound

std::string Pct(double share) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f %%", 100 * share);
  return buf;
}
std::string F(const char* fmt, double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), fmt, v);
  return buf;
}

BreakdownItem Item(const char* key, const char* title) {
  BreakdownItem it;
  it.key = key;
  it.title = title;
  return it;
}

// The verdict of every item: its name for the problem and what to try when flagged, else "ok".
void Judge(BreakdownItem* it, bool flagged, const std::string& verdict, const std::string& advice) {
  it->flagged = flagged;
  it->verdict = flagged ? verdict : "ok";
  it->advice = flagged ? advice : "";
}

// Sums over the steps with phases (seconds), and the step time they cover.
struct Totals {
  double step_s = 0;  // step time without checkpoint stalls
  double phase[records::kNumPhases] = {};
  double comm_bytes = 0;
  double read_bytes = 0, wall_step_s = 0, tokens = 0;  // data throughput
  int nodes = 1;
  int steps = 0;
};

Totals Sum(const RunSummary& r) {
  Totals t;
  for (const auto& s : r.steps) {
    if (!s.phases) continue;
    ++t.steps;
    t.step_s += std::max(0.0, s.step_time_s - s.ckpt_stall_s);
    for (int p = 0; p < records::kNumPhases; ++p) t.phase[p] += s.phases->median[p];
    t.comm_bytes += s.phases->comm_bytes;
    t.read_bytes += s.phases->read_bytes;
    t.wall_step_s += s.step_time_s;
    t.tokens += s.tokens_per_s * s.step_time_s;
    t.nodes = s.phases->nodes;
  }
  if (t.steps == 0) {
    // Older records: rank 0's own data and collective wait.
    for (const auto& s : r.steps) {
      t.step_s += std::max(0.0, s.step_time_s - s.ckpt_stall_s);
      t.phase[0] += s.data_wait_s;
      t.phase[2] += s.comm_s;
    }
  }
  return t;
}

BreakdownItem DataItem(const RunSummary& r, const Totals& t) {
  BreakdownItem it = Item("data_wait", "data wait");
  it.share = t.step_s > 0 ? t.phase[0] / t.step_s : 0;
  it.figure = Pct(it.share) + " of step time waiting for the reader (" +
              (t.steps > 0 ? "median rank" : "rank 0") + ", p50 " + F("%.4f", r.data_wait.p50) +
              " s/step on rank 0)";
  if (t.steps > 0 && t.wall_step_s > 0) {
    // What the readers read per node against what the steps consumed.
    it.figure += "; read " + F("%.2f", t.read_bytes / t.wall_step_s / t.nodes / 1e6) +
                 " MB/s per node (" + std::to_string(t.nodes) +
                 " nodes) while the steps consumed " +
                 F("%.0f", t.tokens / t.wall_step_s / t.nodes) + " tokens/s per node";
    if (t.tokens > 0)
      it.figure += " (" + F("%.1f", t.read_bytes / t.tokens) + " bytes read per token)";
  }
  if (r.read_p50_s && r.read_p95_s) {
    auto latency = [](double s) {
      return s < 1 ? F("%.1f", s * 1e3) + " ms" : F("%.2f", s) + " s";
    };
    it.figure += "; read latency p50 " + latency(*r.read_p50_s) + ", p95 " +
                 latency(*r.read_p95_s) + " per request (rank 0, " +
                 std::to_string(r.read_requests) + " requests)";
  }
  Judge(&it, it.share >= kDataBound, "DATA-BOUND",
        "the loader starves the step: raise data.prefetch_depth, read from faster or closer "
        "storage (copy the packed data to node-local disk), check the data server's bandwidth");
  return it;
}

// The step's collective bytes against the link RUN/commcheck.json measured: how long moving
// them takes at that bus bandwidth (per rank sent / busbw: a ring's all-gather, reduce-scatter
// and all-reduce each send busbw bytes per second per rank), against the compute that could
// hide them. Sets *link_bound when the link alone cannot hide them.
std::string LinkFigure(const RunSummary& r, double per_step, double compute_s, bool* link_bound) {
  const LinkRecord& k = r.link;
  if (!k.present) {
    return "; no record of the link: `ftrain commcheck --sizes 16M --record " + k.path +
           "` over the job's ranks (srun --mpi=pmix, or ftrain launch --nproc N --) writes one, "
           "as slurm/train.sh's pre-flight does";
  }
  const double transfer_s = k.busbw_gbps > 0 ? per_step / (k.busbw_gbps * 1e9) : 0;
  std::string f = "; at the " + F("%.3f", k.busbw_gbps) + " GB/s bus bandwidth `ftrain " +
                  "commcheck` measured (" + k.collective + " of " +
                  (k.bytes >= (1 << 20) ? F("%.0f MiB", static_cast<double>(k.bytes) / (1 << 20))
                                        : F("%.0f KiB", static_cast<double>(k.bytes) / 1024)) +
                  " over " + std::to_string(k.world_size) + " ranks on " +
                  std::to_string(k.num_nodes) + (k.num_nodes == 1 ? " node, " : " nodes, ") +
                  k.backend + ", " + k.path + (k.mismatch.empty() ? "" : "; " + k.mismatch) +
                  ") moving them takes " + F("%.3f", transfer_s) + " s per step";
  if (compute_s > 0) {
    *link_bound = transfer_s > compute_s;
    f += ", " + F("%.0f", 100 * transfer_s / compute_s) + " % of the compute that can hide it: " +
         (*link_bound ? "the link is too slow to hide it" : "the link is fast enough to hide it");
  }
  return f;
}

// What to try for exposed communication: the link is too slow, or it is fast enough and the
// collectives are not overlapped, or (no record) measure it first.
std::string CommAdvice(bool link_bound, bool have_record) {
  const std::string more_compute =
      "raise train.micro_batch so each collective has more compute to hide behind";
  if (link_bound) {
    return "the link cannot carry the step's bytes in its compute time: move fewer bytes "
           "across it (dist.sharding=hybrid_shard keeps the all-gathers within a node, "
           "shard_grad_op gathers once per step), " +
           more_compute + ", check that NCCL uses the fast fabric (NCCL_DEBUG=INFO)";
  }
  if (have_record) {
    return "the link could carry the bytes behind the compute, but they are not overlapped: "
           "keep train.prefetch=true, " +
           more_compute + ", look at the order in a profile (train.profile_steps)";
  }
  return "measure the link (`ftrain commcheck --record`, above), try dist.sharding=hybrid_shard "
         "(full_shard within a node) or shard_grad_op, keep train.prefetch=true, " +
         more_compute;
}

BreakdownItem CommItem(const RunSummary& r, const Totals& t) {
  BreakdownItem it = Item("communication", "exposed communication");
  it.share = t.step_s > 0 ? t.phase[2] / t.step_s : 0;
  it.figure = Pct(it.share) + " of step time waiting on collectives the compute did not hide";
  bool link_bound = false;
  if (t.steps > 0 && t.comm_bytes > 0) {
    const double per_step = t.comm_bytes / t.steps;
    const double compute_s = t.phase[1] / t.steps;
    it.figure += "; " + F("%.1f", per_step / 1e6) + " MB sent per rank per step";
    if (compute_s > 0) {
      it.figure += ", " + F("%.2f", per_step / compute_s / 1e9) +
                   " GB/s per rank hides it behind " + F("%.3f", compute_s) + " s of compute";
    }
    it.figure += LinkFigure(r, per_step, compute_s, &link_bound);
  }
  Judge(&it, it.share >= kCommBound,
        link_bound ? "COMMUNICATION-BOUND (the link)" : "COMMUNICATION-BOUND",
        CommAdvice(link_bound, r.link.present));
  return it;
}

// The host of every rank, from the newest record with the full per-rank vector (empty if none).
std::vector<std::string> RankHosts(const RunSummary& r) {
  for (auto s = r.steps.rbegin(); s != r.steps.rend(); ++s) {
    if (s->phases && !s->phases->hosts.empty()) return s->phases->hosts;
  }
  return {};
}

BreakdownItem StragglerItem(const RunSummary& r, const Totals& t) {
  BreakdownItem it = Item("stragglers", "stragglers");
  it.share = t.step_s > 0 ? t.phase[4] / t.step_s : 0;
  it.figure = Pct(it.share) + " of step time the median rank waits at the step boundary";
  if (t.steps == 0) it.figure = "no per-rank phases recorded (a trainer older than them)";
  for (const records::StragglerGroup& g : records::GroupStragglers(r.stragglers, RankHosts(r))) {
    it.figure += "; " + records::StragglerGroupTitle(g) + " at +" + F("%.0f", g.ExcessPct()) +
                 " % (from step " + std::to_string(g.step) + ": busy " + F("%.3f", g.busy_s) +
                 " s/step against a median of " + F("%.3f", g.median_s) + " s, mostly " + g.cause +
                 ")";
  }
  it.flagged = !r.stragglers.empty();
  it.verdict = it.flagged ? "STRAGGLER" : "ok";
  if (it.flagged) {
    const bool data = r.stragglers.front().cause == "data_wait_s";
    it.advice = data ? "its data is slower to read (larger shards, a slower path): rebalance "
                       "the shards or copy them to node-local disk"
                     : "every other rank waits for it: check that node (thermal or power "
                       "throttling, another job's processes, a failing GPU), drain it "
                       "(scontrol update nodename=... state=drain) or --exclude it";
  }
  return it;
}

BreakdownItem MicroBatchItem(const RunSummary& r, const Totals& t, bool other_cause) {
  BreakdownItem it = Item("micro_batch", "micro-batch / kernel-launch bound");
  it.share = t.step_s > 0 ? t.phase[1] / t.step_s : 0;
  it.figure = Pct(it.share) + " of step time in forward+backward compute";
  if (r.gpu_util) {
    it.figure += ", GPU utilisation p50 " + F("%.0f", r.gpu_util->p50) + " %";
    it.flagged = r.gpu_util->p50 < kGpuLowUtil && !other_cause;
  } else {
    it.figure += " (no GPU utilisation recorded: a CPU run)";
  }
  Judge(&it, it.flagged, "LAUNCH-BOUND?",
        "the GPU idles between small kernels: raise train.micro_batch (and lower "
        "train.grad_accum to keep the batch); confirm with bench/launch_bound.sh (the same "
        "config at half the model and twice the micro-batch): a step time that does not "
        "halve with the model is launch-bound");
  return it;
}

BreakdownItem StallItem(const RunSummary& r) {
  BreakdownItem it = Item("checkpoints", "checkpoint stalls");
  it.share = r.wall_s > 0 ? r.stall_total_s / r.wall_s : 0;
  it.figure = Pct(it.share) + " of wall time (" + F("%.2f", r.stall_total_s) + " s over " +
              std::to_string(r.checkpoint_steps.size()) + " checkpoints, max " +
              F("%.2f", r.stall.max) + " s)";
  Judge(&it, it.share >= kStallBound, "CHECKPOINT-BOUND",
        "hand checkpoints to ckptd (ckpt.daemon) so the step only pays the copy, or checkpoint "
        "less often (ckpt.every_minutes)");
  return it;
}

BreakdownItem FailureItem(const RunSummary& r) {
  BreakdownItem it = Item("failures", "time lost to failures");
  it.share = r.wall_s > 0 ? r.lost_s / r.wall_s : 0;
  it.figure = Pct(it.share) + " of wall time (" + F("%.2f", r.lost_s / 3600) + " h to " +
              std::to_string(r.interruptions.size()) + " interruptions)";
  Judge(&it, it.share >= kFailureBound, "FAILURES",
        "see the interruptions below: checkpoint more often to lose less re-done work, keep a "
        "spare node for faster recovery");
  return it;
}

}  // namespace

namespace {

// The link figure of a commcheck record: the world group's rows at its largest size, the lower
// of all_gather and reduce_scatter (FSDP's collectives), else all_reduce.
Status ParseLinkRecord(const json& j, LinkRecord* k) {
  if (!j.is_object() || !j.contains("results") || !j["results"].is_array()) {
    return Status::Corruption("not a commcheck record (no 'results' array)");
  }
  k->world_size = j.value("world_size", 0);
  k->num_nodes = j.value("num_nodes", 0);
  k->backend = j.value("backend", std::string("?"));
  auto scan = [&](const std::string& want) {
    for (const auto& row : j["results"]) {
      if (!row.is_object() || row.value("group", "") != "world" ||
          row.value("collective", "") != want) {
        continue;
      }
      const int64_t bytes = row.value("bytes", int64_t{0});
      const double bw = row.value("busbw_gbps", 0.0);
      if (bytes <= 0 || bw <= 0) continue;
      if (bytes > k->bytes || (bytes == k->bytes && bw < k->busbw_gbps)) {
        k->bytes = bytes;
        k->busbw_gbps = bw;
        k->collective = want;
      }
    }
  };
  scan("all_gather");
  scan("reduce_scatter");
  if (k->collective.empty()) scan("all_reduce");
  if (k->collective.empty()) {
    return Status::Corruption(
        "holds no world-group all_gather, reduce_scatter or all_reduce "
        "row with bytes and busbw_gbps");
  }
  return Status::Ok();
}

// "4 ranks on 2 nodes", or "2 nodes" when the ranks are unknown (0).
std::string RanksOnNodes(int ranks, int nodes) {
  const std::string n = std::to_string(nodes) + (nodes == 1 ? " node" : " nodes");
  return ranks > 0 ? std::to_string(ranks) + " ranks on " + n : n;
}

// The record against the run's newest step: its node count (phases.nodes) and, where a step
// has the per-rank hosts, its rank count. A mismatch is one warning and a note on the link
// line; the record is still used (it is the only measurement there is), but a record over
// fewer nodes may not have crossed the network the run's collectives cross.
void CheckLinkAgainstRun(RunSummary* r) {
  LinkRecord& k = r->link;
  const records::PhaseSummary* newest = nullptr;
  for (auto s = r->steps.rbegin(); s != r->steps.rend() && !newest; ++s) newest = s->phases.get();
  if (newest == nullptr) return;  // a trainer without phases: nothing to hold it against
  const std::vector<std::string> hosts = RankHosts(*r);
  const int run_ranks = static_cast<int>(hosts.size());
  const bool ranks_differ = run_ranks > 0 && k.world_size != run_ranks;
  if (!ranks_differ && k.num_nodes == newest->nodes) return;
  const std::string made = RanksOnNodes(k.world_size, k.num_nodes);
  const std::string run = RanksOnNodes(run_ranks, newest->nodes);
  k.mismatch = "not the run's " + run;
  r->warnings.push_back(k.path + ": the link record was made over " + made + " but the run has " +
                        run + ": its bandwidth is used anyway; rewrite it " +
                        "with `ftrain commcheck --record " + k.path + "` over the job's ranks");
}

}  // namespace

void ReadLinkRecord(const std::string& path, RunSummary* r) {
  r->link = LinkRecord();
  r->link.path = path;
  std::ifstream in(path);
  if (!in) return;  // no record: the report says how to make one
  std::stringstream text;
  text << in.rdbuf();
  const json j = json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  Status s = j.is_discarded() ? Status::Corruption("is not JSON") : ParseLinkRecord(j, &r->link);
  if (!s.ok()) {
    r->link = LinkRecord();
    r->link.path = path;
    r->warnings.push_back(path + ": " + s.message() +
                          ": the link is left out; rewrite it with "
                          "`ftrain commcheck --record " +
                          path + "` over the job's ranks");
    return;
  }
  r->link.present = true;
  CheckLinkAgainstRun(r);
}

void AnalyzeTimeBreakdown(RunSummary* r) {
  const Totals t = Sum(*r);
  r->breakdown.clear();
  r->breakdown.push_back(DataItem(*r, t));
  r->breakdown.push_back(CommItem(*r, t));
  r->breakdown.push_back(StragglerItem(*r, t));
  if (r->breakdown[1].flagged && r->breakdown[2].flagged) {
    r->breakdown[1].figure +=
        " (with a straggler, much of this is the others waiting for it: "
        "see 3 first)";
  }
  const bool other = r->breakdown[0].flagged || r->breakdown[1].flagged || r->breakdown[2].flagged;
  r->breakdown.push_back(MicroBatchItem(*r, t, other));
  r->breakdown.push_back(StallItem(*r));
  r->breakdown.push_back(FailureItem(*r));
  r->data_bound = r->breakdown[0].flagged;
  r->comm_bound = r->breakdown[1].flagged;
}

void PrintTimeBreakdown(const RunSummary& r, std::ostream& out) {
  if (r.steps.empty()) return;
  out << "\nwhere the time goes (in the order to look)\n";
  int n = 0;
  for (const auto& it : r.breakdown) {
    out << "  " << ++n << ". " << it.title << ": " << it.verdict << ": " << it.figure << "\n";
    if (!it.advice.empty()) out << "     try: " << it.advice << "\n";
  }
}

ojson TimeBreakdownJson(const RunSummary& r) {
  ojson j;
  j["data_bound"] = r.data_bound;
  j["comm_bound"] = r.comm_bound;
  ojson g = ojson::array();
  for (const auto& s : r.stragglers) {
    g.push_back({{"step", s.step},
                 {"rank", s.rank},
                 {"host", s.host},
                 {"busy_s", s.busy_s},
                 {"median_s", s.median_s},
                 {"cause", s.cause}});
  }
  j["stragglers"] = g;
  ojson groups = ojson::array();
  for (const records::StragglerGroup& s : records::GroupStragglers(r.stragglers, RankHosts(r))) {
    groups.push_back({{"host", s.host},
                      {"node", s.node},
                      {"ranks", s.ranks},
                      {"host_ranks", s.host_ranks},
                      {"busy_s", s.busy_s},
                      {"median_s", s.median_s},
                      {"excess_pct", s.ExcessPct()},
                      {"cause", s.cause},
                      {"step", s.step}});
  }
  j["straggler_groups"] = groups;
  if (r.read_p50_s && r.read_p95_s) {
    j["read_latency"] = {
        {"p50_s", *r.read_p50_s}, {"p95_s", *r.read_p95_s}, {"requests", r.read_requests}};
  }
  if (r.link.present) {
    j["link"] = {{"path", r.link.path},
                 {"busbw_gbps", r.link.busbw_gbps},
                 {"bytes", r.link.bytes},
                 {"collective", r.link.collective},
                 {"world_size", r.link.world_size},
                 {"num_nodes", r.link.num_nodes},
                 {"backend", r.link.backend}};
    if (!r.link.mismatch.empty()) j["link"]["mismatch"] = r.link.mismatch;
  }
  ojson items = ojson::array();
  for (const auto& it : r.breakdown) {
    items.push_back({{"key", it.key},
                     {"share", it.share},
                     {"flagged", it.flagged},
                     {"verdict", it.verdict},
                     {"figure", it.figure},
                     {"advice", it.advice}});
  }
  j["items"] = items;
  return j;
}

}  // namespace ftrain::report
