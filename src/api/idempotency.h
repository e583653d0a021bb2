// Idempotency-Key on POSTs (docs/API.md, "Idempotent POSTs"): a client may
// send `Idempotency-Key: <1..255 visible ASCII>` with any POST; the first
// request with a key (scoped to the caller's token) is carried out and its
// reply recorded in the database (store::IdempotencyRow), so a repeat, on
// this instance or any other sharing the database, before or after a
// restart, gets the same status and body back without it being done again.
// A repeat with the same key and another method, target or body is refused
// (422), and one that arrives while the first is still running gets 409.
//
// Two ways to record, per route:
//   - around the handler (every POST but task creation): a pending record
//     is inserted before the handler runs and the reply written after it.
//     A crash in between leaves the record pending: a repeat gets 409, first
//     "in progress", then "outcome unknown" (IdempotencyOptions::stale_ms).
//   - in the effect's own transaction (POST /api/v1/tasks): the task row
//     and the record commit together (RecordInTxn), so a crash cannot leave
//     a task without its record; the reply's body is written afterwards,
//     and a repeat that finds none renders the task the record names.
// A 5xx reply is not recorded: the key is free again.
//
// Thread-safety: IdempotencyKeys may be used from any number of threads;
// the free functions are pure.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>

#include "common/clock.h"
#include "common/status.h"
#include "store/store.h"

namespace hf::api {

inline constexpr const char* kIdempotencyKeyHeader = "Idempotency-Key";
// Set on a reply given again from the record.
inline constexpr const char* kIdempotentReplayedHeader = "Idempotent-Replayed";
// Keys a follower instance makes up for a POST it forwards without one
// (forward.h) start with this; their records are kept forwarded_ttl_ms.
inline constexpr std::string_view kForwardedKeyPrefix = "hf-forward-";

struct IdempotencyOptions {
  std::int64_t ttl_ms = 24LL * 3600 * 1000;  // how long a record is honoured
  // Records of keys a follower made up for its own retries (seconds apart).
  std::int64_t forwarded_ttl_ms = 10LL * 60 * 1000;
  std::int64_t sweep_interval_ms = 60'000;  // between sweeps of expired rows
  // A pending record older than this belongs to a request that will never
  // finish (requests time out after 30 s): its outcome is unknown.
  std::int64_t stale_ms = 120'000;
};

// 1..255 characters, each visible ASCII (0x21..0x7e); InvalidArgument
// naming the header otherwise.
Status ValidateIdempotencyKey(std::string_view key);

// What the request was: hex SHA-256 over method, target (path and query as
// sent) and body, each length-prefixed so no two requests share one.
std::string RequestFingerprint(std::string_view method, std::string_view target,
                               std::string_view body);

// A new random key for a forwarded POST: kForwardedKeyPrefix + 32 hex.
StatusOr<std::string> NewForwardedKey();

class IdempotencyKeys {
 public:
  // `store` and `clock` must outlive this object.
  IdempotencyKeys(store::Store* store, const Clock* clock,
                  IdempotencyOptions options = {});

  enum class Outcome {
    kProceed,     // a new key: carry the request out
    kReplay,      // done before: give `row`'s reply again
    kReused,      // the key was used for another request: 422
    kInProgress,  // the first request is still running: 409, retry shortly
    kUnknown,     // the first request never finished: 409, outcome unknown
  };
  struct Claim {
    Outcome outcome = Outcome::kProceed;
    // kProceed: the record to finish (pending, or to be recorded in the
    // effect's transaction); otherwise the record found.
    store::IdempotencyRow row;
  };

  // Looks `key` of `token_id` up. A new key (or one whose record expired)
  // is kProceed; with `record_pending` it is first recorded as in progress
  // (recording around the handler). Sweeps expired records now and then.
  StatusOr<Claim> Begin(store::RowId token_id, const std::string& key,
                        const std::string& fingerprint, bool record_pending);

  // Writes the reply into the record begun by Begin (or recorded with the
  // effect), keeping what else it holds.
  Status Finish(const store::IdempotencyRow& row, int status,
                const std::string& body);
  // Records a finished request whose key was not recorded pending (the
  // in-transaction route's refusals); a record already there is kept.
  Status RecordFinished(store::IdempotencyRow row, int status,
                        std::string body);
  // Frees the key (a 5xx reply, or a handler that failed before acting).
  Status Abandon(const store::IdempotencyRow& row);

  // Inserts `row` inside the effect's own transaction, replacing an expired
  // record of the same key; AlreadyExists when a live one is there (another
  // request with the key won).
  static Status RecordInTxn(store::Txn& txn, const store::IdempotencyRow& row,
                            store::Millis now);

  store::Millis NowMillis() const { return clock_->NowMillis(); }

 private:
  Outcome Classify(const store::IdempotencyRow& found,
                   const std::string& fingerprint) const;
  void MaybeSweep();

  store::Store* const store_;
  const Clock* const clock_;
  const IdempotencyOptions options_;
  std::atomic<store::Millis> last_sweep_{0};
};

}  // namespace hf::api
