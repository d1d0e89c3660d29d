// A small PMIx client: init, job/node facts, put/commit/fence/get of strings. Used only to
// learn our place in the job and to publish the rendezvous store's address when launched by
// `srun --mpi=pmix`. Does not implement collectives; no PMIx types leak out of this header.
#pragma once

#include <memory>
#include <string>

#include "comm/world.h"
#include "core/status.h"

namespace ftrain::comm {

class PmixClient {
 public:
  // Connects to the local PMIx server (the slurmstepd plugin). Fails when not launched by PMIx.
  static StatusOr<std::unique_ptr<PmixClient>> Connect();
  ~PmixClient();
  PmixClient(const PmixClient&) = delete;
  PmixClient& operator=(const PmixClient&) = delete;

  // Rank, size, local rank/size, node id and count from the PMIx job data.
  StatusOr<WorldInfo> QueryWorld();

  Status Put(const std::string& key, const std::string& value);
  Status Commit();
  // Fence over the whole namespace, collecting data; DeadlineExceeded after timeout_s seconds,
  // counted here (the server's own timeout may be far longer: Slurm's PMIxTimeout).
  Status Fence(int timeout_s);
  StatusOr<std::string> Get(int rank, const std::string& key, int timeout_s);

  int rank() const;
  const std::string& nspace() const { return nspace_; }

 private:
  PmixClient() = default;
  std::string nspace_;
  int rank_ = 0;
  bool fence_abandoned_ = false;  // a fence timed out here and is still open in the server
};

}  // namespace ftrain::comm
