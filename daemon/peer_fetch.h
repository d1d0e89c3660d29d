// FETCH_PEER's worker: pulls rank r's replica of step s from the peers into one of this
// daemon's own slots of that rank (reserved by the server, state kFetching), verifies every
// piece's XXH3 against the hashes the writer's persist recorded, and reports back. Peers are
// the address the trainer named, else the daemons of this start that published
// RUN/ckptd-<node>/peer-addr (files of earlier starts are skipped unread): its own replica
// store first, then the others, all probed at once (dead nodes cost one connect timeout
// together), those that answered asked in turn until one has it. One thread; the server's loop
// never waits for it.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "ckpt/ckptd_protocol.h"
#include "core/status.h"
#include "daemon/peer_address.h"
#include "daemon/shm_slots.h"

namespace ftrain::ckptd {

struct FetchJob {
  uint64_t id = 0;  // the server's, to match the result to the request
  int rank = 0;
  int64_t step = 0;
  uint32_t slot = 0;
  std::shared_ptr<ShmSegment> seg;  // the slot to fill
  std::string address;              // "" = every peer of the run dir
  double deadline_s = 0;            // steady-clock seconds; no new peer is tried after it
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
};

// steady_clock now, in seconds (the unit of FetchJob::deadline_s).
double SteadyNowS();

class PeerFetcher {
 public:
  PeerFetcher(FetcherOptions options, std::function<void(FetchResult)> on_done);
  ~PeerFetcher();
  void Enqueue(FetchJob job);
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
  void Run();
  FetchResult Fetch(const FetchJob& job);
  Status FetchFrom(const std::string& address, const FetchJob& job, FetchResult* out);
  // Connects to every address at once (then hangs up); those that did not answer are
  // remembered for a while and left out, with what went wrong in *tried.
  std::vector<std::string> Reachable(const std::vector<std::string>& peers, std::string* tried);

  const FetcherOptions options_;
  std::function<void(FetchResult)> on_done_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<FetchJob> queue_;                 // guarded by mu_
  bool stop_ = false;                          // guarded by mu_
  std::map<std::string, double> unreachable_;  // worker only: address -> when found dead
  std::thread worker_;
};

}  // namespace ftrain::ckptd
