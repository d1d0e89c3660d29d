// PMIx client implementation over libpmix (v4 API).
#include "comm/pmix_client.h"

#include <pmix.h>

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>

namespace ftrain::comm {
namespace {

Status PmixError(const std::string& what, pmix_status_t rc) {
  return Status::Unavailable(what + " failed: " + PMIx_Error_string(rc) +
                             " (are we running under `srun --mpi=pmix`?)");
}

StatusOr<uint32_t> GetJobUint(const std::string& nspace, const char* key) {
  pmix_proc_t wildcard;
  PMIX_LOAD_PROCID(&wildcard, nspace.c_str(), PMIX_RANK_WILDCARD);
  pmix_value_t* val = nullptr;
  pmix_status_t rc = PMIx_Get(&wildcard, key, nullptr, 0, &val);
  if (rc != PMIX_SUCCESS || val == nullptr) return PmixError(std::string("PMIx_Get ") + key, rc);
  uint32_t out = 0;
  switch (val->type) {
    case PMIX_UINT32:
      out = val->data.uint32;
      break;
    case PMIX_UINT16:
      out = val->data.uint16;
      break;
    case PMIX_INT:
      out = static_cast<uint32_t>(val->data.integer);
      break;
    case PMIX_UINT64:
      out = static_cast<uint32_t>(val->data.uint64);
      break;
    default:
      PMIX_VALUE_RELEASE(val);
      return Status::Internal(std::string("PMIx key ") + key + " has an unexpected type");
  }
  PMIX_VALUE_RELEASE(val);
  return out;
}

StatusOr<uint32_t> GetProcUint(const std::string& nspace, int rank, const char* key) {
  pmix_proc_t proc;
  PMIX_LOAD_PROCID(&proc, nspace.c_str(), static_cast<pmix_rank_t>(rank));
  pmix_value_t* val = nullptr;
  pmix_status_t rc = PMIx_Get(&proc, key, nullptr, 0, &val);
  if (rc != PMIX_SUCCESS || val == nullptr) return PmixError(std::string("PMIx_Get ") + key, rc);
  uint32_t out = 0;
  if (val->type == PMIX_UINT16)
    out = val->data.uint16;
  else if (val->type == PMIX_UINT32)
    out = val->data.uint32;
  else if (val->type == PMIX_INT)
    out = static_cast<uint32_t>(val->data.integer);
  else {
    PMIX_VALUE_RELEASE(val);
    return Status::Internal(std::string("PMIx key ") + key + " has an unexpected type");
  }
  PMIX_VALUE_RELEASE(val);
  return out;
}

// One non-blocking fence: its arguments and its result. Shared with the completion callback,
// which may run after Fence gave up waiting (it then frees the last reference).
struct FenceOp {
  pmix_proc_t all;
  pmix_info_t info[2];
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  pmix_status_t rc = PMIX_SUCCESS;
  ~FenceOp() {
    PMIX_INFO_DESTRUCT(&info[0]);
    PMIX_INFO_DESTRUCT(&info[1]);
  }
};

void FenceDone(pmix_status_t status, void* cbdata) {
  auto* ref = static_cast<std::shared_ptr<FenceOp>*>(cbdata);
  {
    std::lock_guard<std::mutex> lock((*ref)->mu);
    (*ref)->rc = status;
    (*ref)->done = true;
  }
  (*ref)->cv.notify_all();
  delete ref;
}

}  // namespace

StatusOr<std::unique_ptr<PmixClient>> PmixClient::Connect() {
  pmix_proc_t me;
  pmix_status_t rc = PMIx_Init(&me, nullptr, 0);
  if (rc != PMIX_SUCCESS) return PmixError("PMIx_Init", rc);
  std::unique_ptr<PmixClient> c(new PmixClient());
  c->nspace_ = me.nspace;
  c->rank_ = static_cast<int>(me.rank);
  return c;
}

PmixClient::~PmixClient() {
  // Finalize errors are not actionable at shutdown; the process is leaving the job anyway.
  // After a fence this rank gave up on, the server still holds it open: leave without
  // finalizing rather than risk waiting on it.
  if (!fence_abandoned_) (void)PMIx_Finalize(nullptr, 0);
}

int PmixClient::rank() const { return rank_; }

StatusOr<WorldInfo> PmixClient::QueryWorld() {
  WorldInfo w;
  w.source = WorldSource::kPmix;
  w.rank = rank_;
  w.job_id = nspace_;
  FT_ASSIGN_OR_RETURN(uint32_t size, GetJobUint(nspace_, PMIX_JOB_SIZE));
  w.world_size = static_cast<int>(size);
  FT_ASSIGN_OR_RETURN(uint32_t lrank, GetProcUint(nspace_, rank_, PMIX_LOCAL_RANK));
  w.local_rank = static_cast<int>(lrank);
  FT_ASSIGN_OR_RETURN(uint32_t lsize, GetJobUint(nspace_, PMIX_LOCAL_SIZE));
  w.local_world_size = static_cast<int>(lsize);
  FT_ASSIGN_OR_RETURN(uint32_t node, GetProcUint(nspace_, rank_, PMIX_NODEID));
  w.node_rank = static_cast<int>(node);
  auto nodes = GetJobUint(nspace_, PMIX_NUM_NODES);
  if (nodes.ok()) {
    w.num_nodes = static_cast<int>(*nodes);
  } else {
    // Older servers lack PMIX_NUM_NODES; a uniform layout gives it.
    w.num_nodes = (w.world_size + w.local_world_size - 1) / w.local_world_size;
  }
  FT_RETURN_IF_ERROR(ValidateWorld(w, "PMIx job data"));
  return w;
}

Status PmixClient::Put(const std::string& key, const std::string& value) {
  pmix_value_t v;
  PMIX_VALUE_CONSTRUCT(&v);
  v.type = PMIX_STRING;
  v.data.string = const_cast<char*>(value.c_str());
  pmix_status_t rc = PMIx_Put(PMIX_GLOBAL, key.c_str(), &v);
  if (rc != PMIX_SUCCESS) return PmixError("PMIx_Put " + key, rc);
  return Status::Ok();
}

Status PmixClient::Commit() {
  pmix_status_t rc = PMIx_Commit();
  if (rc != PMIX_SUCCESS) return PmixError("PMIx_Commit", rc);
  return Status::Ok();
}

Status PmixClient::Fence(int timeout_s) {
  // Non-blocking, with this rank's own deadline: Slurm's PMIx plugin ignores PMIX_TIMEOUT and
  // holds a fence whose peers never arrive (a rank that did not start, nodes that cannot reach
  // each other) for its own PMIxTimeout (mpi.conf, 300 s by default).
  auto op = std::make_shared<FenceOp>();
  PMIX_LOAD_PROCID(&op->all, nspace_.c_str(), PMIX_RANK_WILDCARD);
  bool collect = true;
  int timeout = timeout_s;
  PMIX_INFO_LOAD(&op->info[0], PMIX_COLLECT_DATA, &collect, PMIX_BOOL);
  PMIX_INFO_LOAD(&op->info[1], PMIX_TIMEOUT, &timeout, PMIX_INT);
  auto* ref = new std::shared_ptr<FenceOp>(op);
  pmix_status_t rc = PMIx_Fence_nb(&op->all, 1, op->info, 2, FenceDone, ref);
  if (rc == PMIX_OPERATION_SUCCEEDED) {  // completed at once (the standard allows it): no callback
    delete ref;
    return Status::Ok();
  }
  if (rc != PMIX_SUCCESS) {
    delete ref;  // not started: no callback will come
    return PmixError("PMIx_Fence_nb", rc);
  }
  std::unique_lock<std::mutex> lock(op->mu);
  if (!op->cv.wait_for(lock, std::chrono::seconds(timeout_s), [&] { return op->done; })) {
    fence_abandoned_ = true;
    return Status::DeadlineExceeded(
        "PMIx fence of namespace " + nspace_ + " did not complete in " + std::to_string(timeout_s) +
        " s (dist.rdzv_timeout_s, or --rdzv-timeout / FTRAIN_RDZV_TIMEOUT): some rank of the "
        "step did not reach the rendezvous, or its nodes cannot reach each other");
  }
  if (op->rc == PMIX_ERR_TIMEOUT) {
    return Status::DeadlineExceeded("PMIx fence of namespace " + nspace_ + " timed out after " +
                                    std::to_string(timeout_s) +
                                    " s: some rank of the step did not reach the rendezvous");
  }
  if (op->rc != PMIX_SUCCESS) return PmixError("PMIx_Fence", op->rc);
  return Status::Ok();
}

StatusOr<std::string> PmixClient::Get(int rank, const std::string& key, int timeout_s) {
  pmix_proc_t proc;
  PMIX_LOAD_PROCID(&proc, nspace_.c_str(), static_cast<pmix_rank_t>(rank));
  pmix_info_t info;
  int timeout = timeout_s;
  PMIX_INFO_LOAD(&info, PMIX_TIMEOUT, &timeout, PMIX_INT);
  pmix_value_t* val = nullptr;
  pmix_status_t rc = PMIx_Get(&proc, key.c_str(), &info, 1, &val);
  PMIX_INFO_DESTRUCT(&info);
  if (rc != PMIX_SUCCESS || val == nullptr) {
    return PmixError("PMIx_Get " + key + " from rank " + std::to_string(rank), rc);
  }
  std::string out;
  if (val->type == PMIX_STRING && val->data.string != nullptr) out = val->data.string;
  PMIX_VALUE_RELEASE(val);
  return out;
}

}  // namespace ftrain::comm
