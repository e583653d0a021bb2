#include "simulation/crashing_store.h"

#include <utility>

namespace hf::simulation {

namespace {

Status Dead() {
  return Status::Unavailable("simulated crash: the server is gone");
}

}  // namespace

CrashingStore::CrashingStore(std::unique_ptr<store::Store> inner)
    : inner_(std::move(inner)) {}

void CrashingStore::Arm(CrashPoint point, int writes_from_now) {
  point_ = point;
  countdown_ = writes_from_now < 1 ? 1 : writes_from_now;
}

void CrashingStore::Disarm() { countdown_ = 0; }

Status CrashingStore::Write(const std::function<Status(store::Txn&)>& fn) {
  if (crashed_.load()) return Dead();
  if (countdown_ > 0 && --countdown_ == 0) {
    crashed_.store(true);
    switch (point_) {
      case CrashPoint::kBeforeWrite:
        return Dead();
      case CrashPoint::kInsideWrite:
        // The function runs, then the transaction is rolled back.
        (void)inner_->Write([&](store::Txn& txn) -> Status {
          HF_RETURN_IF_ERROR(fn(txn));
          return Dead();
        });
        return Dead();
      case CrashPoint::kAfterCommit: {
        const Status s = inner_->Write(fn);
        if (s.ok()) committed_.fetch_add(1);
        return Dead();
      }
    }
  }
  Status s = inner_->Write(fn);
  if (s.ok()) committed_.fetch_add(1);
  return s;
}

Status CrashingStore::Read(const std::function<Status(store::Txn&)>& fn) {
  if (crashed_.load()) return Dead();
  return inner_->Read(fn);
}

}  // namespace hf::simulation
