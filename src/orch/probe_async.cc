// orch/probe_async.cc - probes on threads of their own, answers taken by the next look
// (probe_async.h).
#include "orch/probe_async.h"

#include <chrono>
#include <thread>

namespace ftrain::orch {

AsyncProbes::AsyncProbes(DetectSettings s, std::shared_ptr<Prober> prober)
    : shared_(std::make_shared<Shared>()) {
  shared_->s = s;
  shared_->prober = std::move(prober);
}

AsyncProbes::~AsyncProbes() = default;  // the detached threads keep `shared_` alive

void AsyncProbes::Ask(const std::string& node, double silent_s,
                      const std::vector<std::string>& nodes, double asked_at) {
  {
    std::lock_guard<std::mutex> lock(shared_->mu);
    Slot& slot = shared_->slots[node];
    if (slot.in_flight) return;
    slot.in_flight = true;
  }
  std::shared_ptr<Shared> sh = shared_;
  // Detached: a probe that hangs (bounded by its own timeouts) must never hold up the
  // controller, not even at its exit.
  std::thread([sh, node, nodes, silent_s, asked_at] {
    const auto t0 = std::chrono::steady_clock::now();
    Evidence e = GatherEvidence(sh->s, sh->prober.get(), node, nodes, silent_s);
    e.address = sh->prober->SlurmdAddress(node);  // cached by the first probe: no new query
    e.probe_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::lock_guard<std::mutex> lock(sh->mu);
    Slot& slot = sh->slots[node];
    slot.in_flight = false;
    slot.answer = std::move(e);
    slot.answer_asked_at = asked_at;
  }).detach();
}

std::optional<Evidence> AsyncProbes::Take(const std::string& node, double since) {
  std::lock_guard<std::mutex> lock(shared_->mu);
  auto it = shared_->slots.find(node);
  if (it == shared_->slots.end() || !it->second.answer) return std::nullopt;
  std::optional<Evidence> e = std::move(it->second.answer);
  it->second.answer.reset();
  if (it->second.answer_asked_at <= since) return std::nullopt;  // an earlier silence's
  return e;
}

bool AsyncProbes::InFlight(const std::string& node) const {
  std::lock_guard<std::mutex> lock(shared_->mu);
  auto it = shared_->slots.find(node);
  return it != shared_->slots.end() && it->second.in_flight;
}

}  // namespace ftrain::orch
