// `ftrain sim`: the job controller proven by deterministic simulation (src/orch/sim.h). Runs
// seeds (each a random fault schedule over a simulated multi-day run driving the real
// JobPolicy), checks the invariants after each, prints the failing ones and summary numbers.
// Exit 0: every invariant held; 1: one failed (the first failing seed's trace is printed with
// the command that replays it); 2: bad usage. Flags and printing only; the work is in src/orch.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <map>
#include <mutex>
#include <thread>

#include "cli/cli_util.h"
#include "cli/commands.h"
#include "orch/job_policy.h"
#include "orch/sim.h"

namespace ftrain::cli {
namespace {

namespace po = boost::program_options;

struct Tally {
  uint64_t seeds = 0, faults = 0, starts = 0, launches = 0, decisions = 0, interruptions = 0;
  double lost_s = 0, worst_lost = 0;  // worst: lost / its bound
  std::map<std::string, uint64_t> rules;
  std::map<std::string, uint64_t> outcomes, broken;
  std::map<std::string, uint64_t> first;                        // invariant -> first failing seed
  std::map<uint64_t, std::vector<orch::SimViolation>> failing;  // seed -> what failed
};

void RunRange(uint64_t from, uint64_t count, double days, unsigned threads, Tally* all) {
  std::atomic<uint64_t> next{0};
  std::mutex mu;  // guards *all
  auto work = [&] {
    Tally mine;
    for (uint64_t i; (i = next.fetch_add(1)) < count;) {
      const uint64_t seed = from + i;
      orch::SimOptions o;
      o.seed = seed;
      o.days = days;
      const orch::SimFacts f = orch::RunSeed(o);
      mine.seeds += 1;
      mine.faults += f.faults.size();
      mine.starts += f.starts.size();
      mine.launches += f.launches.size();
      mine.decisions += f.decisions;
      mine.outcomes[orch::OutcomeName(f.outcome)] += 1;
      for (const auto& [r, n] : f.rules) mine.rules[r] += n;
      for (const auto& x : f.interruptions) {
        mine.interruptions += 1;
        mine.lost_s += x.lost_s;
        const double bound = x.faults * (f.ckpt_interval_s + f.recovery_budget_s);
        if (!x.excused) mine.worst_lost = std::max(mine.worst_lost, x.lost_s / bound);
      }
      auto v = orch::CheckInvariants(f);
      for (const auto& x : v) {
        mine.broken[x.invariant] += 1;
        auto it = mine.first.find(x.invariant);
        if (it == mine.first.end() || seed < it->second) mine.first[x.invariant] = seed;
      }
      if (!v.empty()) mine.failing[seed] = std::move(v);
    }
    std::lock_guard<std::mutex> lock(mu);
    all->seeds += mine.seeds, all->faults += mine.faults, all->starts += mine.starts;
    all->launches += mine.launches, all->decisions += mine.decisions;
    all->interruptions += mine.interruptions, all->lost_s += mine.lost_s;
    all->worst_lost = std::max(all->worst_lost, mine.worst_lost);
    for (const auto& [k, n] : mine.rules) all->rules[k] += n;
    for (const auto& [k, n] : mine.outcomes) all->outcomes[k] += n;
    for (const auto& [k, n] : mine.broken) all->broken[k] += n;
    for (const auto& [k, s] : mine.first) {
      auto it = all->first.find(k);
      if (it == all->first.end() || s < it->second) all->first[k] = s;
    }
    all->failing.merge(mine.failing);
  };
  std::vector<std::thread> pool;
  for (unsigned t = 1; t < threads; ++t) pool.emplace_back(work);
  work();
  for (auto& t : pool) t.join();
}

void PrintTrace(uint64_t seed, double days, bool full) {
  orch::SimOptions o;
  o.seed = seed;
  o.days = days;
  o.trace = true;
  const orch::SimFacts f = orch::RunSeed(o);
  const size_t keep = full ? f.trace.size() : std::min<size_t>(f.trace.size(), 200);
  std::cout << "trace of seed " << seed << " (" << f.trace.size() << " lines"
            << (keep < f.trace.size() ? ", the last " + std::to_string(keep) : std::string())
            << "):\n";
  for (size_t i = f.trace.size() - keep; i < f.trace.size(); ++i) {
    std::cout << "  " << f.trace[i] << "\n";
  }
  for (const auto& x : f.faults) {
    std::cout << "  fault " << x.kind << (x.persistent ? " persistent" : "")
              << (x.may_fail ? " may_fail" : "") << " t=" << static_cast<int64_t>(x.t) << " "
              << x.detail << "\n";
  }
}

void PrintSummary(const Tally& t, double seconds) {
  const double n = std::max<double>(1, t.seeds);
  std::printf(
      "%llu seeds in %.2f s: %.0f seeds/s; per seed %.2f faults, %.2f starts, "
      "%.2f launches, %.0f decisions\n",
      static_cast<unsigned long long>(t.seeds), seconds, t.seeds / std::max(seconds, 1e-9),
      t.faults / n, t.starts / n, t.launches / n, t.decisions / n);
  std::printf(
      "interruptions: %llu, %.0f s of compute lost each on average, the worst at %.2f "
      "of its bound\n",
      static_cast<unsigned long long>(t.interruptions),
      t.lost_s / std::max<double>(1, t.interruptions), t.worst_lost);
  std::string never;
  for (const auto& r : orch::kRules) {
    if (!t.rules.count(r.id)) never += std::string(" ") + r.id;
  }
  std::printf(
      "rules fired: %zu of %zu; never:%s\n",
      orch::kRules.size() - (never.empty() ? 0 : std::count(never.begin(), never.end(), ' ')),
      orch::kRules.size(), never.empty() ? " none" : never.c_str());
  std::printf("outcomes:");
  for (const auto& [k, c] : t.outcomes) std::printf(" %s %llu", k.c_str(), (unsigned long long)c);
  std::printf("\ninvariants:");
  for (const auto& name : orch::SimInvariants()) {
    auto it = t.broken.find(name);
    const uint64_t c = it == t.broken.end() ? 0 : it->second;
    if (c == 0) {
      std::printf("\n  %-28s held", name.c_str());
    } else {
      std::printf("\n  %-28s FAILED in %llu seeds (first: seed %llu)", name.c_str(),
                  (unsigned long long)c, (unsigned long long)t.first.at(name));
    }
  }
  std::printf("\n");
}

}  // namespace

int RunSim(int argc, char** argv) {
  const std::string program = "ftrain sim";
  po::options_description opts(
      "ftrain sim --seed N [--seeds COUNT] [--days D] [--trace] [--threads T]\n"
      "The job controller's policy driven through a simulated Slurm cluster with a seeded fault\n"
      "schedule; checks its invariants (docs/design.md, \"Controller simulation\")");
  uint64_t seed = 1, seeds = 1, max_print = 50;
  double days = 2;
  unsigned threads = std::max(1u, std::thread::hardware_concurrency());
  bool trace = false;
  opts.add_options()("help,h", "show this help")("seed", po::value<uint64_t>(&seed),
                                                 "the first seed (default 1)")(
      "seeds", po::value<uint64_t>(&seeds), "how many seeds from --seed (default 1)")(
      "days", po::value<double>(&days), "simulated training time of each run (default 2)")(
      "trace", po::bool_switch(&trace), "print every event of the (first failing) seed")(
      "threads", po::value<unsigned>(&threads),
      "worker threads (default: every core; the results do not depend on it)")(
      "max-print", po::value<uint64_t>(&max_print), "failing seeds listed (default 50)");
  po::variables_map vm;
  Status s = ParseFlags(program, argc, argv, opts, {}, &vm);
  if (s.ok() && (seeds == 0 || !(days > 0 && days <= 365) || threads == 0 || threads > 256)) {
    s = Status::InvalidArgument("--seeds must be > 0, --days in (0, 365], --threads in 1..256");
  }
  if (!s.ok()) return Fail(program, s);
  if (vm.count("help")) {
    std::cout << opts;
    return kExitOk;
  }
  Tally t;
  const auto t0 = std::chrono::steady_clock::now();
  RunRange(seed, seeds, days, threads, &t);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  uint64_t printed = 0;
  for (const auto& [sd, v] : t.failing) {
    if (printed++ >= max_print) break;
    for (const auto& x : v)
      std::cout << "seed " << sd << ": " << x.invariant << ": " << x.detail << "\n";
  }
  if (t.failing.size() > max_print) {
    std::cout << "(" << t.failing.size() - max_print << " more failing seeds not listed)\n";
  }
  if (trace && t.failing.empty() && seeds == 1) PrintTrace(seed, days, true);
  PrintSummary(t, secs);
  if (t.failing.empty()) return kExitOk;
  const uint64_t first = t.failing.begin()->first;
  PrintTrace(first, days, trace);
  char days_text[32];
  std::snprintf(days_text, sizeof(days_text), "%g", days);
  std::cout << "FAILED: " << t.failing.size() << " of " << t.seeds
            << " seeds broke an invariant; the first is seed " << first
            << "; replay it with: ftrain sim --seed " << first << " --days " << days_text
            << " --trace\n";
  return kExitBad;
}

}  // namespace ftrain::cli
