#include "api/idempotency.h"

#include <openssl/evp.h>
#include <openssl/rand.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <array>
#include <utility>

namespace hf::api {

using store::IdempotencyRow;
using store::Millis;
using store::Txn;

namespace {

constexpr char kHex[] = "0123456789abcdef";
constexpr int kSweepBatch = 1000;
constexpr int kSweepBatches = 10;

std::string Hex(const unsigned char* data, std::size_t size) {
  std::string out;
  out.reserve(size * 2);
  for (std::size_t i = 0; i < size; ++i) {
    out.push_back(kHex[data[i] >> 4]);
    out.push_back(kHex[data[i] & 0xf]);
  }
  return out;
}

}  // namespace

Status ValidateIdempotencyKey(std::string_view key) {
  if (key.empty() || key.size() > 255) {
    return Status::InvalidArgument(
        "must be 1..255 visible ASCII characters, got " +
            std::to_string(key.size()),
        kIdempotencyKeyHeader);
  }
  for (const char c : key) {
    if (c < 0x21 || c > 0x7e) {
      return Status::InvalidArgument(
          "must be visible ASCII characters only (no spaces or control "
          "characters)",
          kIdempotencyKeyHeader);
    }
  }
  return Status::Ok();
}

std::string RequestFingerprint(std::string_view method, std::string_view target,
                               std::string_view body) {
  std::string input;
  input.reserve(method.size() + target.size() + body.size() + 64);
  for (const std::string_view part : {method, target, body}) {
    input += std::to_string(part.size());
    input += ':';
    input += part;
  }
  std::array<unsigned char, EVP_MAX_MD_SIZE> digest{};
  unsigned int len = 0;
  EVP_Digest(input.data(), input.size(), digest.data(), &len, EVP_sha256(),
             nullptr);
  return Hex(digest.data(), len);
}

StatusOr<std::string> NewForwardedKey() {
  std::array<unsigned char, 16> bytes{};
  if (RAND_bytes(bytes.data(), bytes.size()) != 1) {
    return Status::Internal("the system random source failed");
  }
  return std::string(kForwardedKeyPrefix) + Hex(bytes.data(), bytes.size());
}

IdempotencyKeys::IdempotencyKeys(store::Store* store, const Clock* clock,
                                 IdempotencyOptions options)
    : store_(store), clock_(clock), options_(options) {}

IdempotencyKeys::Outcome IdempotencyKeys::Classify(
    const IdempotencyRow& found, const std::string& fingerprint) const {
  if (found.fingerprint != fingerprint) return Outcome::kReused;
  if (found.status != 0) return Outcome::kReplay;
  return clock_->NowMillis() - found.created_at >= options_.stale_ms
             ? Outcome::kUnknown
             : Outcome::kInProgress;
}

StatusOr<IdempotencyKeys::Claim> IdempotencyKeys::Begin(
    store::RowId token_id, const std::string& key,
    const std::string& fingerprint, bool record_pending) {
  MaybeSweep();
  const Millis now = clock_->NowMillis();
  IdempotencyRow fresh;
  fresh.token_id = token_id;
  fresh.key = key;
  fresh.fingerprint = fingerprint;
  fresh.created_at = now;
  fresh.expires_at =
      now + (key.starts_with(kForwardedKeyPrefix)
                 ? std::min(options_.forwarded_ttl_ms, options_.ttl_ms)
                 : options_.ttl_ms);
  Claim claim;
  const auto look = [&](bool insert) {
    return [&, insert](Txn& txn) -> Status {
      claim = Claim{Outcome::kProceed, fresh};  // set: `fn` may run again
      auto found = txn.GetIdempotencyKey(token_id, key);
      if (found.ok()) {
        if (found->expires_at > now) {
          claim.row = *found;
          claim.outcome = Classify(*found, fingerprint);
          return Status::Ok();
        }
        // Expired and not swept yet: the key is new again.
        if (!insert) return Status::Ok();
        HF_RETURN_IF_ERROR(txn.DeleteIdempotencyKey(token_id, key));
      } else if (found.status().code() != StatusCode::kNotFound) {
        return found.status();
      }
      return insert ? txn.InsertIdempotencyKey(fresh) : Status::Ok();
    };
  };
  Status s =
      record_pending ? store_->Write(look(true)) : store_->Read(look(false));
  if (s.code() == StatusCode::kAlreadyExists) {
    // Another request with this key recorded it between our read and our
    // insert (another instance): what it recorded decides.
    s = store_->Read(look(false));
    if (s.ok() && claim.outcome == Outcome::kProceed) {
      claim.outcome = Outcome::kInProgress;
    }
  }
  if (!s.ok()) return s.WithContext("Idempotency-Key");
  return claim;
}

Status IdempotencyKeys::Finish(const IdempotencyRow& row, int status,
                               const std::string& body) {
  return store_->Write([&](Txn& txn) -> Status {
    // What is stored, not `row`: a task's record got its task id in the
    // task's transaction.
    auto stored = txn.GetIdempotencyKey(row.token_id, row.key);
    if (!stored.ok()) return stored.status();
    stored->status = status;
    stored->body = body;
    return txn.UpdateIdempotencyKey(*stored);
  });
}

Status IdempotencyKeys::RecordFinished(IdempotencyRow row, int status,
                                       std::string body) {
  row.status = status;
  row.body = std::move(body);
  const Millis now = clock_->NowMillis();
  const Status s = store_->Write(
      [&](Txn& txn) -> Status { return RecordInTxn(txn, row, now); });
  return s.code() == StatusCode::kAlreadyExists ? Status::Ok() : s;
}

Status IdempotencyKeys::Abandon(const IdempotencyRow& row) {
  return store_->Write([&](Txn& txn) -> Status {
    return txn.DeleteIdempotencyKey(row.token_id, row.key);
  });
}

Status IdempotencyKeys::RecordInTxn(Txn& txn, const IdempotencyRow& row,
                                    Millis now) {
  auto found = txn.GetIdempotencyKey(row.token_id, row.key);
  if (found.ok()) {
    if (found->expires_at > now) {
      return Status::AlreadyExists("Idempotency-Key '" + row.key +
                                   "' is already recorded");
    }
    HF_RETURN_IF_ERROR(txn.DeleteIdempotencyKey(row.token_id, row.key));
  } else if (found.status().code() != StatusCode::kNotFound) {
    return found.status();
  }
  return txn.InsertIdempotencyKey(row);
}

void IdempotencyKeys::MaybeSweep() {
  const Millis now = clock_->NowMillis();
  Millis last = last_sweep_.load();
  if (now - last < options_.sweep_interval_ms) return;
  if (!last_sweep_.compare_exchange_strong(last, now)) return;  // another
  // Batches, so no write holds the database long; a few per sweep, so a
  // busy server (many forwarded heartbeats) keeps up.
  int total = 0;
  for (int batch = 0; batch < kSweepBatches; ++batch) {
    int deleted = 0;
    const Status s = store_->Write([&](Txn& txn) -> Status {
      auto n = txn.DeleteExpiredIdempotencyKeys(now, kSweepBatch);
      if (!n.ok()) return n.status();
      deleted = *n;
      return Status::Ok();
    });
    if (!s.ok()) {
      spdlog::warn("sweeping expired Idempotency-Keys: {}", s.ToString());
      break;
    }
    total += deleted;
    if (deleted < kSweepBatch) break;
  }
  if (total > 0) spdlog::debug("swept {} expired Idempotency-Keys", total);
}

}  // namespace hf::api
