// NodeWork: a generation per node that moves when the server has new work
// for the node's agent — a task bound to the node (a gold task's MIG
// create command with it), a cancel of a task it runs, an operator's
// deletion of a bound task's slice, a defragmentation move to or from it
// — and a wait for it to move (GET /api/v1/nodes/{node}/work). All of
// these are the leader's writes, made where this NodeWork is. An agent
// that waits there runs its next cycle as soon as there is something to
// do, instead of at its next heartbeat. Only a hint: an agent that never
// waits, and any other change (a MIG destroy after a task ended, a quota
// change), are picked up at the next cycle as before.
//
// Waiters hold an HTTP worker each: at most `max_waiters` wait at once;
// past that a wait returns at once, saying it did not wait.
//
// Thread-safety: an internal mutex, a leaf (never held across I/O,
// nothing else taken under it); safe from any thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <unordered_map>

#include "common/thread_annotations.h"
#include "store/store.h"

namespace hf::server {

class NodeWork {
 public:
  explicit NodeWork(int max_waiters) : max_waiters_(max_waiters) {}

  NodeWork(const NodeWork&) = delete;
  NodeWork& operator=(const NodeWork&) = delete;

  // The server has new work for node `node` (its row id).
  void Changed(store::RowId node);
  // Node `node`'s generation now (1 before any change).
  std::uint64_t Generation(store::RowId node) const;

  struct Waited {
    std::uint64_t generation = 0;
    bool waited = false;  // false: too many waiters, or stopped
  };
  // Returns once node `node`'s generation differs from `after` (at once if
  // it does now), after `timeout`, or at Stop(); with the generation then.
  Waited Wait(store::RowId node, std::uint64_t after,
              std::chrono::milliseconds timeout);
  // Every wait returns at once, now and later (the server shuts down).
  void Stop();
  // How many waits are held now.
  int waiters() const;

 private:
  std::uint64_t GenerationLocked(store::RowId node) const HF_REQUIRES(mu_);

  const int max_waiters_;
  mutable Mutex mu_;
  CondVar changed_cv_;
  std::unordered_map<store::RowId, std::uint64_t> generations_
      HF_GUARDED_BY(mu_);
  int waiters_ HF_GUARDED_BY(mu_) = 0;
  bool stop_ HF_GUARDED_BY(mu_) = false;
};

}  // namespace hf::server
