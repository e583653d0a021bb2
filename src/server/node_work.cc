// NodeWork (node_work.h).
#include "server/node_work.h"

namespace hf::server {

void NodeWork::Changed(store::RowId node) {
  {
    MutexLock lock(mu_);
    auto [it, fresh] = generations_.try_emplace(node, 1);
    ++it->second;
  }
  changed_cv_.NotifyAll();
}

std::uint64_t NodeWork::GenerationLocked(store::RowId node) const {
  const auto it = generations_.find(node);
  return it == generations_.end() ? 1 : it->second;
}

std::uint64_t NodeWork::Generation(store::RowId node) const {
  MutexLock lock(mu_);
  return GenerationLocked(node);
}

NodeWork::Waited NodeWork::Wait(store::RowId node, std::uint64_t after,
                                std::chrono::milliseconds timeout) {
  MutexLock lock(mu_);
  Waited out{GenerationLocked(node), false};
  if (out.generation != after || stop_ || waiters_ >= max_waiters_ ||
      timeout <= std::chrono::milliseconds(0)) {
    return out;
  }
  ++waiters_;
  changed_cv_.WaitFor(mu_, timeout, [&] {
    mu_.AssertHeld();  // a predicate runs with the lock held
    return stop_ || GenerationLocked(node) != after;
  });
  --waiters_;
  out.generation = GenerationLocked(node);
  out.waited = !stop_;
  return out;
}

int NodeWork::waiters() const {
  MutexLock lock(mu_);
  return waiters_;
}

void NodeWork::Stop() {
  {
    MutexLock lock(mu_);
    stop_ = true;
  }
  changed_cv_.NotifyAll();
}

}  // namespace hf::server
