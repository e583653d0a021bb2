// Leadership: the lease's state machine (see leadership.h for the safety
// argument), the fence ControlPlane calls, and the instance announcements.
#include "server/leadership.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <nlohmann/json.hpp>
#include <utility>

namespace hf::server {

using json = nlohmann::json;
using store::Txn;

namespace {

// Announcements older than this are dropped (a departed instance).
constexpr store::Millis kForgetInstanceMillis = store::Millis{600'000};

// The lease as stored (nullopt when absent).
StatusOr<std::optional<std::string>> ReadLeaseRaw(Txn& txn) {
  return txn.GetMeta(kLeaseKey);
}

}  // namespace

std::string EncodeLease(const Lease& lease) {
  return json{{"id", lease.id},       {"url", lease.url},
              {"term", lease.term},   {"renewal", lease.renewal},
              {"since", lease.since}, {"released", lease.released}}
      .dump();
}

std::optional<Lease> DecodeLease(std::string_view text) {
  const json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("id") || !j["id"].is_string() ||
      !j.contains("term") || !j["term"].is_number_integer()) {
    return std::nullopt;
  }
  Lease lease;
  lease.id = j["id"].get<std::string>();
  lease.url = j.value("url", "");
  lease.term = j["term"].get<std::int64_t>();
  lease.renewal = j.value("renewal", std::int64_t{0});
  lease.since = j.value("since", std::int64_t{0});
  lease.released = j.value("released", false);
  return lease;
}

namespace {

// The stored lease, decoded (nullopt when absent or not a lease).
StatusOr<std::optional<Lease>> ReadLease(Txn& txn) {
  auto raw = ReadLeaseRaw(txn);
  if (!raw.ok()) return raw.status();
  if (!raw->has_value()) return std::optional<Lease>();
  return DecodeLease(**raw);
}

// The lease names instance `id` in term `term`.
bool HeldBy(const std::optional<Lease>& lease, const std::string& id,
            std::int64_t term) {
  return lease && lease->id == id && lease->term == term;
}

}  // namespace

StatusOr<ClusterInfo> ReadCluster(store::Store& store) {
  ClusterInfo out;
  HF_RETURN_IF_ERROR(store.Read([&](Txn& txn) -> Status {
    out = ClusterInfo{};
    auto lease = ReadLeaseRaw(txn);
    if (!lease.ok()) return lease.status();
    if (lease->has_value()) out.leader = DecodeLease(**lease);
    auto instances = txn.GetMeta(kInstancesKey);
    if (!instances.ok()) return instances.status();
    if (!instances->has_value()) return Status::Ok();
    const json j =
        json::parse(**instances, nullptr, /*allow_exceptions=*/false);
    if (!j.is_object()) return Status::Ok();
    for (const auto& [id, info] : j.items()) {
      if (!info.is_object()) continue;
      out.instances.push_back(InstanceInfo{
          id, info.value("url", ""), info.value("last_seen", std::int64_t{0})});
    }
    return Status::Ok();
  }));
  std::sort(
      out.instances.begin(), out.instances.end(),
      [](const InstanceInfo& a, const InstanceInfo& b) { return a.id < b.id; });
  return out;
}

Leadership::Leadership(store::Store* store, const Clock* wall,
                       const Clock* monotonic, LeadershipOptions options)
    : store_(store),
      wall_(wall),
      mono_(monotonic),
      options_(std::move(options)),
      margin_ms_(options_.margin_ms > 0 ? options_.margin_ms
                                        : options_.ttl_ms / 6),
      url_(options_.url) {}

Leadership::~Leadership() { Stop(); }

bool Leadership::MayActAt(std::int64_t mono_now) const {
  // On a store only this process can open, nobody can take the lease over:
  // a slow renewal (a loaded disk) is no reason to stop.
  return state_ == State::kLeader &&
         (options_.exclusive_store ||
          mono_now - renew_start_ <= options_.ttl_ms - margin_ms_);
}

bool Leadership::MayAct() const {
  const std::int64_t now = mono_->NowMillis();
  MutexLock lock(mu_);
  return MayActAt(now);
}

std::int64_t Leadership::Term() const {
  MutexLock lock(mu_);
  return state_ == State::kLeader ? term_ : 0;
}

bool Leadership::IsLeader() const {
  MutexLock lock(mu_);
  return state_ == State::kLeader;
}

bool Leadership::Serving() const { return serving_.load() && MayAct(); }

bool Leadership::Lost() const {
  MutexLock lock(mu_);
  return state_ == State::kLost;
}

std::optional<Lease> Leadership::KnownLeader() const {
  MutexLock lock(mu_);
  return known_;
}

Status Leadership::CheckInTxn(Txn& txn) const {
  std::int64_t term = 0;
  {
    const std::int64_t now = mono_->NowMillis();
    MutexLock lock(mu_);
    if (!MayActAt(now)) {
      return Status::Unavailable("instance " + options_.instance_id +
                                 " is not the leader (or its lease may have "
                                 "run out); retry on the leader");
    }
    term = term_;
  }
  auto raw = ReadLeaseRaw(txn);
  if (!raw.ok()) return raw.status();
  std::optional<Lease> lease;
  if (raw->has_value()) lease = DecodeLease(**raw);
  if (!HeldBy(lease, options_.instance_id, term) || lease->released) {
    return Status::Unavailable(
        "fenced: the leader lease no longer names instance " +
        options_.instance_id + " in term " + std::to_string(term) +
        (lease ? " (now " + lease->id + ", term " +
                     std::to_string(lease->term) + ")"
               : std::string()));
  }
  // Rewritten unchanged: a concurrent takeover now conflicts with this
  // transaction on the same row (see leadership.h).
  return txn.SetMeta(kLeaseKey, **raw);
}

Status Leadership::TryTake(const std::optional<std::string>& expected,
                           const std::optional<Lease>& previous) {
  const std::int64_t start = mono_->NowMillis();
  Lease mine;
  mine.id = options_.instance_id;
  mine.url = url_;
  mine.term = (previous ? previous->term : 0) + 1;
  mine.since = wall_->NowMillis();
  std::string encoded = EncodeLease(mine);
  Status taken = store_->Write([&](Txn& txn) -> Status {
    auto raw = ReadLeaseRaw(txn);
    if (!raw.ok()) return raw.status();
    if (*raw != expected) {
      return Status::Aborted("the lease changed meanwhile");
    }
    return txn.SetMeta(kLeaseKey, encoded);
  });
  if (!taken.ok()) return taken;
  {
    MutexLock lock(mu_);
    state_ = State::kLeader;
    term_ = mine.term;
    renew_start_ = start;
    known_ = mine;
    seen_raw_ = encoded;
    seen_at_ = start;
  }
  spdlog::warn(
      "leadership: instance {} took the leader lease, term {} (previous: "
      "{})",
      options_.instance_id, mine.term,
      previous ? previous->id + " term " + std::to_string(previous->term)
               : std::string("none"));
  return Status::Ok();
}

Status Leadership::Renew() {
  const std::int64_t start = mono_->NowMillis();
  std::int64_t term = 0;
  {
    MutexLock lock(mu_);
    term = term_;
  }
  Lease renewed;
  Status written = store_->Write([&](Txn& txn) -> Status {
    auto lease = ReadLease(txn);
    if (!lease.ok()) return lease.status();
    if (!HeldBy(*lease, options_.instance_id, term)) {
      return Status::FailedPrecondition(
          "the lease was taken over" +
          (*lease ? " by " + (*lease)->id + " (term " +
                        std::to_string((*lease)->term) + ")"
                  : std::string()));
    }
    renewed = **lease;
    renewed.renewal += 1;
    return txn.SetMeta(kLeaseKey, EncodeLease(renewed));
  });
  if (!written.ok()) return written;
  MutexLock lock(mu_);
  if (state_ != State::kLeader) return Status::Ok();
  renew_start_ = std::max(renew_start_, start);
  known_ = renewed;
  return Status::Ok();
}

Status Leadership::Announce() {
  const store::Millis now = wall_->NowMillis();
  return store_->Write([&](Txn& txn) -> Status {
    auto raw = txn.GetMeta(kInstancesKey);
    if (!raw.ok()) return raw.status();
    json all = json::object();
    if (raw->has_value()) {
      all = json::parse(**raw, nullptr, /*allow_exceptions=*/false);
      if (!all.is_object()) all = json::object();
    }
    for (auto it = all.begin(); it != all.end();) {
      const bool stale =
          !it->is_object() ||
          now - it->value("last_seen", std::int64_t{0}) > kForgetInstanceMillis;
      it = stale ? all.erase(it) : std::next(it);
    }
    all[options_.instance_id] = {{"url", url_}, {"last_seen", now}};
    return txn.SetMeta(kInstancesKey, all.dump());
  });
}

void Leadership::MarkLost(const std::string& why) {
  std::function<void(const std::string&)> report;
  {
    MutexLock lock(mu_);
    if (state_ == State::kLost) return;
    state_ = State::kLost;
    lost_why_ = why;
    serving_.store(false);
    if (!lost_reported_) {
      lost_reported_ = true;
      report = callbacks_.on_lost;
    }
  }
  spdlog::error("leadership: instance {} lost the leader lease: {}",
                options_.instance_id, why);
  if (report) report(why);
}

Status Leadership::Tick() {
  MutexLock tick(tick_mu_);
  const std::int64_t now = mono_->NowMillis();
  const std::int64_t renew_every =
      std::max<std::int64_t>(options_.ttl_ms / 3, 1);
  State state;
  bool first = false;
  bool announce_due = false;
  {
    MutexLock lock(mu_);
    // Handed over: never takes the lease again (it would take its own).
    if (state_ == State::kResigned) return Status::Ok();
    state = state_;
    first = first_tick_;
    first_tick_ = false;
    announce_due = !announced_ || now - last_announce_ >= renew_every;
    if (state == State::kLeader && !MayActAt(now)) {
      state = State::kLost;
    }
    if (state == State::kLost && state_ != State::kLost) {
      lost_why_ = "not renewed within " +
                  std::to_string(options_.ttl_ms - margin_ms_) + " ms";
    }
  }
  if (state == State::kLost) {
    std::string why;
    {
      MutexLock lock(mu_);
      why = lost_why_;
    }
    MarkLost(why);
    return Status::FailedPrecondition("the leader lease was lost: " + why);
  }

  Status result = Status::Ok();
  if (state == State::kLeader) {
    bool due = false;
    {
      MutexLock lock(mu_);
      due = now - renew_start_ >= renew_every;
    }
    if (due) {
      result = Renew();
      if (result.code() == StatusCode::kFailedPrecondition) {
        MarkLost(result.message());
        return result;
      }
    }
  } else {
    std::optional<std::string> raw;
    HF_RETURN_IF_ERROR(store_->Read([&](Txn& txn) -> Status {
      auto r = ReadLeaseRaw(txn);
      if (!r.ok()) return r.status();
      raw = *r;
      return Status::Ok();
    }));
    std::optional<Lease> lease;
    if (raw) lease = DecodeLease(*raw);
    bool take = false;
    {
      MutexLock lock(mu_);
      if (lease) known_ = lease;
      // Take it at once when there is no lease at all (a fresh database:
      // nobody can be acting), or when it was left by an earlier run of
      // this very instance (same id, i.e. the same host and port: that
      // process is gone) or found in a store only one process can open.
      // Otherwise only after it stayed unchanged for a
      // full ttl on our own clock.
      const bool no_lease = !raw.has_value();
      const bool own_leftover =
          first && lease &&
          (lease->id == options_.instance_id || options_.exclusive_store);
      if (raw != seen_raw_) {
        seen_raw_ = raw;
        seen_at_ = now;
      }
      // A released lease was handed over: its holder stopped acting first.
      const bool released = lease && lease->released;
      take = no_lease || own_leftover || released ||
             now - seen_at_ >= options_.ttl_ms;
    }
    if (take) {
      result = TryTake(raw, lease);
      if (result.ok()) {
        MutexLock lock(mu_);
        if (callbacks_.on_elected && !promoting_) {
          // At most once: a lost lease is never won back (crash-only).
          promoting_ = true;
          promoter_ = std::thread([this] { Promote(); });
        } else if (!callbacks_.on_elected) {
          serving_.store(true);
        }
      } else if (result.code() == StatusCode::kAborted) {
        result = Status::Ok();  // someone else moved first; watch again
      }
    }
  }
  if (announce_due) {
    Status announced = Announce();
    if (announced.ok()) {
      MutexLock lock(mu_);
      announced_ = true;
      last_announce_ = now;
    } else if (result.ok()) {
      result = announced;
    }
  }
  return result;
}

void Leadership::Promote() {
  Status promoted = callbacks_.on_elected();
  if (!promoted.ok()) {
    MarkLost("promotion failed: " + promoted.ToString());
  } else {
    serving_.store(true);
    spdlog::warn(
        "leadership: instance {} leads (term {}): ledger rebuilt, "
        "scheduling",
        options_.instance_id, Term());
  }
  {
    MutexLock lock(mu_);
    promoting_ = false;
    settled_ = true;
  }
  cv_.NotifyAll();
}

void Leadership::Start(Callbacks callbacks) {
  {
    MutexLock lock(mu_);
    callbacks_ = std::move(callbacks);
    stop_ = false;
  }
  ticker_ = std::thread([this] { TickLoop(); });
  watchdog_ = std::thread([this] { WatchdogLoop(); });
}

void Leadership::Stop() {
  {
    MutexLock lock(mu_);
    stop_ = true;
  }
  cv_.NotifyAll();
  if (ticker_.joinable()) ticker_.join();
  if (watchdog_.joinable()) watchdog_.join();
  if (promoter_.joinable()) promoter_.join();
}

Status Leadership::Resign() {
  std::int64_t term = 0;
  {
    MutexLock lock(mu_);
    if (state_ != State::kLeader) return Status::Ok();
    // Stop acting before the lease says so: MayAct is false from here on,
    // and CheckInTxn refuses every leader write still to commit.
    state_ = State::kResigned;
    term = term_;
    serving_.store(false);
  }
  Status written = store_->Write([&](Txn& txn) -> Status {
    auto lease = ReadLease(txn);
    if (!lease.ok()) return lease.status();
    if (!HeldBy(*lease, options_.instance_id, term)) {
      return Status::Ok();  // already taken over: nothing to hand on
    }
    Lease released = **lease;
    released.released = true;
    released.renewal += 1;
    return txn.SetMeta(kLeaseKey, EncodeLease(released));
  });
  if (written.ok()) {
    spdlog::info("leadership: instance {} handed the lease over (term {})",
                 options_.instance_id, term);
  }
  return written;
}

void Leadership::WaitSettled(std::int64_t timeout_ms) {
  MutexLock lock(mu_);
  cv_.WaitFor(mu_, std::chrono::milliseconds(timeout_ms), [&] {
    mu_.AssertHeld();  // a predicate runs with the lock held
    return settled_ || stop_;
  });
}

void Leadership::TickLoop() {
  const auto interval =
      std::chrono::milliseconds(std::max<std::int64_t>(options_.ttl_ms / 6, 1));
  for (;;) {
    Status ticked = Tick();
    if (!ticked.ok() && ticked.code() != StatusCode::kFailedPrecondition) {
      spdlog::warn("leadership: {}", ticked.ToString());
    }
    MutexLock lock(mu_);
    if (!promoting_ && !settled_) {
      settled_ = true;  // the first tick is done and nothing is promoting
      cv_.NotifyAll();
    }
    if (stop_ || state_ == State::kLost || state_ == State::kResigned) return;
    // A follower looks more often than a leader must renew, so a lease
    // handed over (Resign) is taken within a fraction of a second.
    const auto wait = state_ == State::kFollower
                          ? std::min(interval, std::chrono::milliseconds(200))
                          : interval;
    cv_.WaitFor(mu_, wait, [&] {
      mu_.AssertHeld();
      return stop_;
    });
    if (stop_) return;
  }
}

// A Tick blocked in the store (a black-holed database connection) cannot
// notice that the lease ran out; this thread only looks at the clock.
void Leadership::WatchdogLoop() {
  for (;;) {
    bool expired = false;
    {
      MutexLock lock(mu_);
      cv_.WaitFor(mu_, std::chrono::milliseconds(50), [&] {
        mu_.AssertHeld();
        return stop_;
      });
      if (stop_ || state_ == State::kLost || state_ == State::kResigned) {
        return;
      }
      expired = state_ == State::kLeader && !MayActAt(mono_->NowMillis());
    }
    if (expired) {
      MarkLost("not renewed within " +
               std::to_string(options_.ttl_ms - margin_ms_) +
               " ms (database unreachable or too slow)");
      return;
    }
  }
}

}  // namespace hf::server
