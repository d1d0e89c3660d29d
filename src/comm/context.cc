// DistContext: discovery, rendezvous (PMIx or env TCPStore), world-size agreement, groups.
#include "comm/context.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <functional>
#include <sstream>
#include <thread>
#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "comm/gloo_comm.h"
#include "core/config.h"
#include "core/log.h"
#ifdef FTRAIN_WITH_NCCL
#include "comm/nccl_comm.h"
#endif
#include "comm/pmix_client.h"

namespace ftrain::comm {
namespace {

constexpr char kPmixStoreKey[] = "ftrain.rdzv.store";

std::string FirstLine(const std::string& s) { return s.substr(0, s.find('\n')); }

// The address other ranks should use to reach this process: FTRAIN_RDZV_ADDR when set,
// else the IPv4 address the host name resolves to, else loopback.
std::string AdvertisedAddress() {
  const char* forced = std::getenv("FTRAIN_RDZV_ADDR");
  if (forced != nullptr && *forced != '\0') return forced;
  char host[256] = {0};
  if (gethostname(host, sizeof(host) - 1) != 0) return "127.0.0.1";
  struct addrinfo hints = {};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  struct addrinfo* res = nullptr;
  if (getaddrinfo(host, nullptr, &hints, &res) != 0 || res == nullptr) return "127.0.0.1";
  char buf[INET_ADDRSTRLEN] = {0};
  auto* sin = reinterpret_cast<struct sockaddr_in*>(res->ai_addr);
  inet_ntop(AF_INET, &sin->sin_addr, buf, sizeof(buf));
  freeaddrinfo(res);
  return buf;
}

std::vector<uint8_t> Bytes(const std::string& s) { return {s.begin(), s.end()}; }
std::string Str(const std::vector<uint8_t>& v) { return {v.begin(), v.end()}; }

StatusOr<c10::intrusive_ptr<c10d::Store>> ConnectStore(const std::string& host, int port,
                                                       bool is_server, int timeout_s,
                                                       const std::string& how) {
  c10d::TCPStoreOptions opts;
  opts.port = static_cast<uint16_t>(port);
  opts.isServer = is_server;
  opts.waitWorkers = false;
  opts.timeout = std::chrono::seconds(timeout_s);
  try {
    return c10::intrusive_ptr<c10d::Store>(c10::make_intrusive<c10d::TCPStore>(host, opts));
  } catch (const std::exception& e) {
    return Status::DeadlineExceeded(
        "cannot reach the rendezvous store at " + host + ":" + std::to_string(port) + " (" + how +
        ") within " + std::to_string(timeout_s) + " s: " + FirstLine(e.what()) +
        "; check that rank 0 is running and the address is reachable, or raise "
        "FTRAIN_RDZV_TIMEOUT");
  }
}

struct RankRecord {
  int world_size = 0, node = 0, local = 0;
};

std::string EncodeRecord(const WorldInfo& w) {
  return std::to_string(w.world_size) + " " + std::to_string(w.node_rank) + " " +
         std::to_string(w.local_rank);
}

bool DecodeRecord(const std::string& s, RankRecord* r) {
  std::istringstream in(s);
  return static_cast<bool>(in >> r->world_size >> r->node >> r->local);
}

// Every rank publishes (world size, node, local rank); rank 0 checks agreement and publishes
// a verdict with the layout; every rank reads the verdict. Returns the node of every rank.
StatusOr<std::vector<RankRecord>> AgreeOnWorld(c10d::Store& store, const WorldInfo& w,
                                               int timeout_s) {
  const std::string prefix = "ftrain/rdzv/";
  try {
    store.setTimeout(std::chrono::seconds(timeout_s));
    store.set(prefix + "rank/" + std::to_string(w.rank), Bytes(EncodeRecord(w)));
    std::vector<RankRecord> layout(static_cast<size_t>(w.world_size));
    if (w.rank == 0) {
      std::string verdict = "ok";
      auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
      for (int r = 0; r < w.world_size && verdict == "ok"; ++r) {
        const std::string key = prefix + "rank/" + std::to_string(r);
        while (!store.check({key})) {
          if (std::chrono::steady_clock::now() > deadline) {
            std::string missing;
            for (int m = r; m < w.world_size; ++m) {
              if (!store.check({prefix + "rank/" + std::to_string(m)})) {
                missing += (missing.empty() ? "" : ",") + std::to_string(m);
              }
            }
            verdict = "timeout: ranks " + missing + " of " + std::to_string(w.world_size) +
                      " did not join the rendezvous within " + std::to_string(timeout_s) +
                      " s; check that they were started and use the same job/MASTER_ADDR";
            break;
          }
          std::this_thread::sleep_for(std::chrono::milliseconds(20));
        }
        if (verdict != "ok") break;
        RankRecord rec;
        if (!DecodeRecord(Str(store.get(key)), &rec)) {
          verdict = "mismatch: rank " + std::to_string(r) + " published a malformed record";
        } else if (rec.world_size != w.world_size) {
          verdict = "mismatch: rank " + std::to_string(r) + " believes the world size is " +
                    std::to_string(rec.world_size) + " but rank 0 believes " +
                    std::to_string(w.world_size) + "; start every rank with the same world size";
        }
        layout[static_cast<size_t>(r)] = rec;
      }
      std::string payload = verdict;
      if (verdict == "ok") {
        for (const auto& rec : layout) {
          payload += " " + std::to_string(rec.world_size) + " " + std::to_string(rec.node) + " " +
                     std::to_string(rec.local);
        }
      }
      store.set(prefix + "verdict", Bytes(payload));
      if (verdict != "ok") {
        // This process hosts the store: linger until the ranks that joined have read the
        // verdict (bounded), or they would see a broken connection instead of the reason.
        int joined = 0;
        for (int r = 1; r < std::max(w.world_size, 64); ++r) {
          if (store.check({prefix + "rank/" + std::to_string(r)})) ++joined;
        }
        const auto linger = std::chrono::steady_clock::now() + std::chrono::seconds(10);
        while (std::chrono::steady_clock::now() < linger &&
               store.add(prefix + "seen", 0) < joined) {
          std::this_thread::sleep_for(std::chrono::milliseconds(20));
        }
      }
      if (verdict.rfind("timeout", 0) == 0) return Status::DeadlineExceeded(verdict);
      if (verdict != "ok") return Status::InvalidArgument(verdict);
      return layout;
    }
    std::string payload = Str(store.get(prefix + "verdict"));  // waits up to the timeout
    store.add(prefix + "seen", 1);
    if (payload.rfind("timeout", 0) == 0)
      return Status::DeadlineExceeded("rank 0 reports " + payload);
    if (payload.rfind("ok", 0) != 0) return Status::InvalidArgument("rank 0 reports " + payload);
    std::istringstream in(payload.substr(2));
    int count = 0;
    RankRecord rec;
    while (in >> rec.world_size >> rec.node >> rec.local) {
      if (count < w.world_size) layout[static_cast<size_t>(count)] = rec;
      ++count;
    }
    if (count != w.world_size) {
      return Status::InvalidArgument(
          "world size mismatch: this rank (" + DescribeWorld(w) + ") believes the world size is " +
          std::to_string(w.world_size) + " but rank 0 has " + std::to_string(count) +
          " ranks; start every rank with the same world size");
    }
    return layout;
  } catch (const std::exception& e) {
    return Status::DeadlineExceeded("rank " + std::to_string(w.rank) +
                                    ": rendezvous did not complete within " +
                                    std::to_string(timeout_s) + " s: " + FirstLine(e.what()) +
                                    "; rank 0 or another rank is missing or died");
  }
}

}  // namespace

StatusOr<DistOptions> DistOptionsFromEnv(DistOptions base) {
  const char* t = std::getenv("FTRAIN_RDZV_TIMEOUT");
  if (t != nullptr && *t != '\0') {
    int64_t v;
    if (!ParseInt64(t, &v) || v <= 0 || v > 86400) {
      return Status::InvalidArgument(std::string("FTRAIN_RDZV_TIMEOUT='") + t +
                                     "' must be a number of seconds in [1, 86400]");
    }
    base.rdzv_timeout_s = static_cast<int>(v);
  }
  return base;
}

struct DistContext::Impl {
  WorldInfo world;
  std::unique_ptr<PmixClient> pmix;
  c10::intrusive_ptr<c10d::Store> store;
  std::unique_ptr<Comm> world_comm;
  std::unique_ptr<Comm> intra;
  std::unique_ptr<Comm> inter;
  std::unique_ptr<Comm> world_reduce, intra_reduce;  // nccl only: the reduce-scatters' streams
  std::unique_ptr<Comm> control;  // Gloo world group for CPU control tensors (nccl only)
  std::string rdzv;
  std::string collective_settings;  // nccl: version and the pinned reduction-order settings
};

DistContext::DistContext() : impl_(std::make_unique<Impl>()) {}
DistContext::~DistContext() = default;

namespace {

// Who this rank is and the store every group bootstraps through.
struct Rendezvous {
  WorldInfo world;
  std::unique_ptr<PmixClient> pmix;
  c10::intrusive_ptr<c10d::Store> store;
  std::string description;
};

// PMIx (srun --mpi=pmix): rank 0 hosts the store and publishes its address; a fence later
// every rank reads it.
StatusOr<Rendezvous> RendezvousPmix(const std::string& self_addr, int timeout) {
  Rendezvous rv;
  FT_ASSIGN_OR_RETURN(rv.pmix, PmixClient::Connect());
  FT_ASSIGN_OR_RETURN(rv.world, rv.pmix->QueryWorld());
  std::string store_addr;
  if (rv.world.rank == 0) {
    FT_ASSIGN_OR_RETURN(rv.store, ConnectStore(self_addr, 0, true, timeout, "rank 0's own"));
    auto* tcp = static_cast<c10d::TCPStore*>(rv.store.get());
    store_addr = self_addr + ":" + std::to_string(tcp->getPort());
    FT_RETURN_IF_ERROR(rv.pmix->Put(kPmixStoreKey, store_addr));
  }
  FT_RETURN_IF_ERROR(rv.pmix->Commit());
  FT_RETURN_IF_ERROR(rv.pmix->Fence(timeout));
  if (rv.world.rank != 0) {
    FT_ASSIGN_OR_RETURN(store_addr, rv.pmix->Get(0, kPmixStoreKey, timeout));
    size_t colon = store_addr.rfind(':');
    int64_t port = 0;
    if (colon == std::string::npos || !ParseInt64(store_addr.substr(colon + 1), &port)) {
      return Status::Internal("rank 0 published a malformed store address '" + store_addr +
                              "' through PMIx");
    }
    FT_ASSIGN_OR_RETURN(rv.store, ConnectStore(store_addr.substr(0, colon), static_cast<int>(port),
                                               false, timeout, "published by rank 0 through PMIx"));
  }
  rv.description = "pmix namespace " + rv.pmix->nspace() + ", store " + store_addr;
  return rv;
}

// Slurm or torchrun environment: the TCPStore at MASTER_ADDR/MASTER_PORT (hosted by
// `ftrain launch`, else by rank 0); a single process needs none.
StatusOr<Rendezvous> RendezvousEnv(int timeout) {
  Rendezvous rv;
  EnvMap env = CurrentEnviron();
  FT_ASSIGN_OR_RETURN(rv.world, DiscoverFromEnv(env));
  if (rv.world.world_size == 1) {
    rv.store = c10::make_intrusive<c10d::HashStore>();
    rv.description = "single process";
    return rv;
  }
  const bool hosted = env.count("FTRAIN_STORE_HOSTED") && env["FTRAIN_STORE_HOSTED"] == "1";
  const bool server = rv.world.rank == 0 && !hosted;
  const std::string how =
      std::string(WorldSourceName(rv.world.source)) + " rendezvous: MASTER_ADDR/MASTER_PORT";
  FT_ASSIGN_OR_RETURN(
      rv.store, ConnectStore(rv.world.master_addr, rv.world.master_port, server, timeout, how));
  rv.description = how + " = " + rv.world.master_addr + ":" + std::to_string(rv.world.master_port);
  return rv;
}

// Every rank agrees on the world; nodes are numbered by their lowest rank, not by the
// launcher's host-name order: a step relaunched with a spare in place of a dead node keeps
// every group's member order. Returns every rank's record (renumbered); updates w->node_rank.
StatusOr<std::vector<RankRecord>> AgreeAndNumberNodes(c10d::Store& store, WorldInfo* w,
                                                      int timeout) {
  FT_ASSIGN_OR_RETURN(std::vector<RankRecord> layout, AgreeOnWorld(store, *w, timeout));
  std::vector<int> launcher_node;
  for (const RankRecord& rec : layout) launcher_node.push_back(rec.node);
  const std::vector<int> node_index = NodesByLowestRank(launcher_node);
  for (size_t r = 0; r < layout.size(); ++r) layout[r].node = node_index[r];
  if (node_index[static_cast<size_t>(w->rank)] != w->node_rank) {
    FT_LOG(Info) << "dist: launcher node id " << w->node_rank << " is node "
                 << node_index[static_cast<size_t>(w->rank)] << " by lowest rank";
    w->node_rank = node_index[static_cast<size_t>(w->rank)];
  }
  return layout;
}

// The communicators of this rank.
struct Groups {
  std::unique_ptr<Comm> world, control, intra, inter, world_reduce, intra_reduce;
};
using GroupFactory =
    std::function<StatusOr<std::unique_ptr<Comm>>(const std::string& name, int rank, int size)>;

// Intra-node (same node, ordered by local rank) and inter-node (same local rank, by node).
Status BuildNodeGroups(const WorldInfo& w, const std::vector<RankRecord>& layout,
                       const DistOptions& options, const GroupFactory& make_group, Groups* g) {
  std::vector<std::pair<int, int>> intra, inter;  // (sort key, rank)
  for (int r = 0; r < w.world_size; ++r) {
    const RankRecord& rec = layout[static_cast<size_t>(r)];
    if (rec.node == w.node_rank) intra.push_back({rec.local, r});
    if (rec.local == w.local_rank) inter.push_back({rec.node, r});
  }
  std::sort(intra.begin(), intra.end());
  std::sort(inter.begin(), inter.end());
  auto index_of = [&](const std::vector<std::pair<int, int>>& v) {
    for (size_t i = 0; i < v.size(); ++i) {
      if (v[i].second == w.rank) return static_cast<int>(i);
    }
    return -1;
  };
  const std::string intra_name = "node" + std::to_string(w.node_rank);
  const std::string inter_name = "local" + std::to_string(w.local_rank);
#ifdef FTRAIN_WITH_NCCL
  if (options.backend == "nccl") {
    // ncclCommSplit of the world communicator: no second bootstrap through the store, and
    // NCCL may share the parent's resources. Every rank splits twice, in this order.
    FT_ASSIGN_OR_RETURN(g->intra,
                        SplitNcclComm(*g->world, w.node_rank, index_of(intra), intra_name));
    FT_ASSIGN_OR_RETURN(g->inter,
                        SplitNcclComm(*g->world, w.local_rank, index_of(inter), inter_name));
    // The reduce-scatters' own communicators (DistContext::world_reduce): every rank splits
    // twice more, in this order.
    FT_ASSIGN_OR_RETURN(g->world_reduce, SplitNcclComm(*g->world, 0, w.rank, "world-reduce"));
    FT_ASSIGN_OR_RETURN(g->intra_reduce, SplitNcclComm(*g->world, w.node_rank, index_of(intra),
                                                       intra_name + "-reduce"));
    return Status::Ok();
  }
#else
  (void)options;
#endif
  FT_ASSIGN_OR_RETURN(g->intra,
                      make_group(intra_name, index_of(intra), static_cast<int>(intra.size())));
  FT_ASSIGN_OR_RETURN(g->inter,
                      make_group(inter_name, index_of(inter), static_cast<int>(inter.size())));
  return Status::Ok();
}

// The world group, the Gloo control group (nccl only) and the node groups. `settings`
// receives NCCL's version and reduction-order settings (nccl only).
StatusOr<Groups> BuildGroups(const c10::intrusive_ptr<c10d::Store>& store, const WorldInfo& w,
                             const std::vector<RankRecord>& layout, const DistOptions& options,
                             const std::string& self_addr, std::string* settings) {
  const auto op_timeout = std::chrono::milliseconds(1000LL * options.op_timeout_s);
  // One factory for every group: Gloo over TCP, or NCCL on this rank's GPU (local rank).
  GroupFactory make_group = [&](const std::string& name, int rank, int size) {
#ifdef FTRAIN_WITH_NCCL
    if (options.backend == "nccl") {
      return CreateNcclComm(store, name, rank, size,
                            options.cuda_device >= 0 ? options.cuda_device : w.local_rank,
                            op_timeout);
    }
#endif
    return CreateGlooComm(store, name, rank, size, self_addr, op_timeout);
  };
#ifdef FTRAIN_WITH_NCCL
  if (options.backend == "nccl") {
    *settings = PinNcclReductionOrder(options.order_free);  // before the first communicator
    FT_LOG(Info) << "dist: " << *settings;
  }
#else
  (void)settings;
#endif
  Groups g;
  FT_ASSIGN_OR_RETURN(g.world, make_group("world", w.rank, w.world_size));
  if (options.backend != "gloo") {
    FT_ASSIGN_OR_RETURN(
        g.control, CreateGlooComm(store, "control", w.rank, w.world_size, self_addr, op_timeout));
  }
  if (options.build_node_groups) {
    FT_RETURN_IF_ERROR(BuildNodeGroups(w, layout, options, make_group, &g));
  }
  return g;
}

}  // namespace

StatusOr<std::unique_ptr<DistContext>> DistContext::Init(const DistOptions& options) {
  if (options.backend != "gloo" && options.backend != "nccl") {
    return Status::InvalidArgument("dist.backend '" + options.backend + "' is not gloo or nccl");
  }
#ifndef FTRAIN_WITH_NCCL
  if (options.backend == "nccl") {
    return Status::FailedPrecondition(
        "dist.backend = nccl, but this ftrain was built without NCCL (no nccl.h/libnccl under "
        "FTRAIN_CUDA_ROOT); use gloo or rebuild on a machine with CUDA and NCCL");
  }
#endif
  std::unique_ptr<DistContext> ctx(new DistContext());
  Impl& im = *ctx->impl_;
  const std::string self_addr = AdvertisedAddress();
  const int timeout = options.rdzv_timeout_s;
  FT_ASSIGN_OR_RETURN(Rendezvous rv, HasPmixEnv(CurrentEnviron())
                                         ? RendezvousPmix(self_addr, timeout)
                                         : RendezvousEnv(timeout));
  im.world = rv.world;
  im.pmix = std::move(rv.pmix);
  im.store = rv.store;
  im.rdzv = rv.description;
  SetLogPrefix("rank " + std::to_string(im.world.rank) + "/" + std::to_string(im.world.world_size));
  FT_ASSIGN_OR_RETURN(std::vector<RankRecord> layout,
                      AgreeAndNumberNodes(*im.store, &im.world, timeout));
  FT_ASSIGN_OR_RETURN(Groups g, BuildGroups(im.store, im.world, layout, options, self_addr,
                                            &im.collective_settings));
  im.world_comm = std::move(g.world);
  im.control = std::move(g.control);
  im.intra = std::move(g.intra);
  im.inter = std::move(g.inter);
  im.world_reduce = std::move(g.world_reduce);
  im.intra_reduce = std::move(g.intra_reduce);
  FT_LOG(Info) << "dist: " << DescribeWorld(im.world) << " via " << im.rdzv;
  return ctx;
}

const WorldInfo& DistContext::world() const { return impl_->world; }
Comm& DistContext::world_comm() { return *impl_->world_comm; }
Comm& DistContext::control() { return impl_->control ? *impl_->control : *impl_->world_comm; }
Comm& DistContext::intra_node() { return *impl_->intra; }
Comm& DistContext::inter_node() { return *impl_->inter; }
Comm& DistContext::world_reduce() {
  return impl_->world_reduce ? *impl_->world_reduce : *impl_->world_comm;
}
Comm& DistContext::intra_node_reduce() {
  return impl_->intra_reduce ? *impl_->intra_reduce : *impl_->intra;
}
Status DistContext::Health() {
  for (Comm* c : {impl_->world_comm.get(), impl_->intra.get(), impl_->inter.get(),
                  impl_->world_reduce.get(), impl_->intra_reduce.get(), impl_->control.get()}) {
    if (c == nullptr) continue;
    Status s = c->Health();
    if (!s.ok()) return s.Annotate("group " + c->name());
  }
  return Status::Ok();
}
const std::string& DistContext::rendezvous_description() const { return impl_->rdzv; }
const std::string& DistContext::collective_settings() const { return impl_->collective_settings; }

}  // namespace ftrain::comm
