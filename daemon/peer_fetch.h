// FETCH_PEER's worker: pulls rank r's replica of step s from the peers into one of this
// daemon's own slots of that rank (reserved by the server, state kFetching), verifies every
// piece's XXH3 against the hashes the writer's persist recorded, and reports back. Peers are
// the address the trainer named, else every other daemon's RUN/ckptd-<node>/peer-addr
// (asked in turn until one has it). One thread; the server's loop never waits for it.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "ckpt/ckptd_protocol.h"
#include "core/status.h"
#include "shm_slots.h"

namespace ftrain::ckptd {

struct FetchJob {
  int rank = 0;
  int64_t step = 0;
  uint32_t slot = 0;
  std::shared_ptr<ShmSegment> seg;  // the slot to fill
  std::string address;              // "" = every peer of the run dir
};

struct FetchResult {
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
  double timeout_s = 10;
};

class PeerFetcher {
 public:
  PeerFetcher(FetcherOptions options, std::function<void(FetchResult)> on_done);
  ~PeerFetcher();
  void Enqueue(FetchJob job);
  // The peer addresses under the run dir (RUN/ckptd-*/peer-addr): this daemon's own first
  // (its replica store), then every other one.
  static std::vector<std::string> PeersOf(const std::string& run_dir, const std::string& node);

 private:
  void Run();
  FetchResult Fetch(const FetchJob& job);
  Status FetchFrom(const std::string& address, const FetchJob& job, FetchResult* out);

  const FetcherOptions options_;
  std::function<void(FetchResult)> on_done_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<FetchJob> queue_;  // guarded by mu_
  bool stop_ = false;           // guarded by mu_
  std::thread worker_;
};

}  // namespace ftrain::ckptd
