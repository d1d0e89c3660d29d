// FETCH_PEER's worker: pulls rank r's replica of step s from the peers into one of this
// daemon's own slots of that rank (reserved by the server, state kFetching), verifies every
// piece's XXH3 against the hashes the writer's persist recorded, and reports back. Peers are
// the address the trainer named, else the daemons of this start that published
// RUN/ckptd-<node>/peer-addr (files of earlier starts are skipped unread): its own replica
// store first, then the others, all probed at once (dead nodes cost one connect timeout
// together), those that answered asked in turn until one has it. One thread; the server's loop
// never waits for it.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "ckpt/ckptd_protocol.h"
#include "core/env.h"
#include "core/status.h"
#include "daemon/peer_address.h"
#include "daemon/shm_slots.h"
#include "daemon/work_queue.h"

namespace ftrain::ckptd {

struct FetchJob {
  uint64_t id = 0;  // the server's, to match the result to the request
  int rank = 0;
  int64_t step = 0;
  uint32_t slot = 0;
  std::shared_ptr<ShmSegment> seg;  // the slot to fill
  std::string address;              // "" = every peer of the run dir
  double deadline_s = 0;            // SteadyNowS() seconds; no new peer is tried after it
};

struct FetchResult {
  uint64_t id = 0;
  int rank = 0;
  int64_t step = 0;
  uint32_t slot = 0;
  Status status;               // NotFound: no peer holds it
  ckpt::proto::Submit submit;  // the descriptor (slot = this daemon's slot)
  std::string source;          // "peer HOST:PORT"
  uint64_t bytes = 0;
  double seconds = 0;
};

struct FetcherOptions {
  std::string job, secret, run_dir, node;
  std::string start;  // peer::StartIdOf: peer-addr files of other starts are skipped
  double timeout_s = 10;
  Env* env = nullptr;  // the clock of the deadlines (the daemon's Env); required
};

// `env`'s monotonic clock in seconds (the unit of FetchJob::deadline_s).
double SteadyNowS(Env* env);

// Peers that did not answer a probe are left out of the next fetches for `remember_s` (a dead
// node stays dead; a restarted daemon moves port), then asked again. Time is `env`'s clock,
// so the rule is tested with a fake one.
class UnreachablePeers {
 public:
  explicit UnreachablePeers(Env* env, double remember_s = 60);
  double Now() const;
  bool Skip(const std::string& address, double now) const;
  void MarkDead(const std::string& address, double now);
  void MarkAlive(const std::string& address);
  double remember_s() const { return remember_s_; }

 private:
  Env* env_;
  const double remember_s_;
  std::map<std::string, double> dead_since_;  // address -> when found dead
};

class PeerFetcher {
 public:
  PeerFetcher(FetcherOptions options, std::function<void(FetchResult)> on_done);
  void Enqueue(FetchJob job) { queue_.Enqueue(std::move(job)); }
  // Every RUN/ckptd-*/peer-addr that parses, by node name.
  static std::vector<std::pair<std::string, PeerAddress>> PeerFiles(const std::string& run_dir);
  // The peer addresses under the run dir (RUN/ckptd-*/peer-addr) of start `start`: this
  // daemon's own first (its replica store; in *own instead, if given), then every other
  // one. *skipped (if given): the nodes whose file is of another start.
  static std::vector<std::string> PeersOf(const std::string& run_dir, const std::string& node,
                                          const std::string& start,
                                          std::vector<std::string>* skipped = nullptr,
                                          std::string* own = nullptr);

 private:
  FetchResult Fetch(const FetchJob& job);
  Status FetchFrom(const std::string& address, const FetchJob& job, FetchResult* out);
  // Connects to every address at once (then hangs up); those that did not answer are
  // remembered for a while and left out, with what went wrong in *tried.
  std::vector<std::string> Reachable(const std::vector<std::string>& peers, std::string* tried);

  const FetcherOptions options_;
  UnreachablePeers unreachable_;            // worker only
  WorkQueue<FetchJob, FetchResult> queue_;  // last: its worker uses the members above
};

}  // namespace ftrain::ckptd
