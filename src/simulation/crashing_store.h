// CrashingStore: the failpoint in the control plane's database that the
// whole-system simulation crashes the server with. It wraps a real Store.
// Armed, a Write dies at one of three points: before it starts (nothing of
// it is kept), inside its transaction (the function ran, then the
// transaction rolls back, as when the process dies before COMMIT), or after
// its commit (the change is durable but the caller never hears of it). From
// then on every call fails, as in a process that is gone, until the
// simulation throws the whole server away and starts a new one on the same
// database.
//
// Thread-safety: as the wrapped Store; arming is for the simulation's one
// thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

#include "store/store.h"

namespace hf::simulation {

enum class CrashPoint { kBeforeWrite, kInsideWrite, kAfterCommit };

class CrashingStore final : public store::Store {
 public:
  explicit CrashingStore(std::unique_ptr<store::Store> inner);

  // The `writes_from_now`-th Write from now (1: the next one) crashes at
  // `point`.
  void Arm(CrashPoint point, int writes_from_now);
  void Disarm();
  // A crash happened: every call fails from now on.
  bool crashed() const { return crashed_.load(); }
  // Writes that committed (a cheap "did anything change" for the checks).
  std::int64_t committed_writes() const { return committed_.load(); }

  Status Write(const std::function<Status(store::Txn&)>& fn) override;
  Status Read(const std::function<Status(store::Txn&)>& fn) override;
  store::StoreInfo info() const override { return inner_->info(); }

  store::Store* inner() const { return inner_.get(); }

 private:
  const std::unique_ptr<store::Store> inner_;
  std::atomic<bool> crashed_{false};
  std::atomic<std::int64_t> committed_{0};
  int countdown_ = 0;  // 0: disarmed
  CrashPoint point_ = CrashPoint::kBeforeWrite;
};

}  // namespace hf::simulation
