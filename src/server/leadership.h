// Leader election for several hf-server instances on one database (issue 8).
//
// One lease, kept in the store's meta table under "leader": a JSON value
// {id, url, term, renewal, since}. Only the instance it names binds tasks,
// runs GC, writes MIG commands and changes the ledger. The lease is safe
// without synchronised clocks because every duration is measured on the
// measuring instance's OWN monotonic clock:
//
//  - the leader renews every ttl/3 (renewal counter + 1, so the value
//    changes) and stops acting as soon as more than ttl - margin has passed
//    since the START of its last successful renewal;
//  - a follower takes over only when the value it reads has not changed for
//    a full ttl since it FIRST saw that value, bumping the term.
//
// A follower first sees a value no earlier than the leader started writing
// it, so it waits at least ttl from the renewal's start, while the leader
// stopped at ttl - margin from that same instant: the margin absorbs clock
// rate differences and the time a leader needs to notice (network-partition
// safety). Fencing makes the database itself refuse a stale leader:
// `CheckInTxn` runs inside every leader write transaction, checks that the
// lease still names this instance and term, and rewrites the lease value
// unchanged. That write turns "the leader read the lease" into a write-write
// conflict with any takeover, so PostgreSQL (SERIALIZABLE; first updater
// wins) cannot commit both a stale leader's bind and the takeover that
// supersedes it in the wrong order, and a reader never sees the takeover
// without the bind before it. SQLite has one writer, so the same holds.
//
// Demotion is crash-only: a leader that loses the lease (taken, or not
// renewed in time) calls `on_lost`, which in hf-server logs the reason and
// exits with kExitLeadershipLost; a supervisor restarts it as a follower.
// Nothing of the ledger has to be unwound, since the database is the truth.
//
// Instances also announce themselves (id, url, last seen) in the meta key
// "instances" on every renewal tick, for GET /api/v1/cluster.
//
// Thread-safety: every public method may be called from any thread; `Tick`
// calls are serialised internally (tests drive it directly with a fake
// clock; `Start` runs it on a thread).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "common/status.h"
#include "common/thread_annotations.h"
#include "store/store.h"

namespace hf::server {

inline constexpr std::string_view kLeaseKey = "leader";
inline constexpr std::string_view kInstancesKey = "instances";
// hf-server's exit code after losing the lease (EX_TEMPFAIL: restart me).
inline constexpr int kExitLeadershipLost = 75;

// What ControlPlane asks before and inside leader-only writes.
class WriteFence {
 public:
  virtual ~WriteFence() = default;
  // Local and cheap: false once this instance must not act (not leader, or
  // its lease may have run out).
  virtual bool MayAct() const = 0;
  // Inside the write transaction of leader work: OK only while the stored
  // lease names this instance with its term (Unavailable otherwise); it
  // rewrites the lease value unchanged (see the top of this file).
  virtual Status CheckInTxn(store::Txn& txn) const = 0;
  // The term this instance leads in (0 when it does not lead).
  virtual std::int64_t Term() const = 0;
};

struct Lease {
  std::string id;   // the holder's instance id
  std::string url;  // its advertised API URL
  std::int64_t term = 0;
  std::int64_t renewal = 0;  // bumped on every renewal
  store::Millis since = 0;   // wall clock when the term began (informative)
  // Handed over: its holder stopped acting before writing this, so any
  // follower takes the lease at once (a leader stopped with SIGTERM).
  bool released = false;
};

std::string EncodeLease(const Lease& lease);
// nullopt when `text` is not a lease.
std::optional<Lease> DecodeLease(std::string_view text);

struct InstanceInfo {
  std::string id;
  std::string url;
  store::Millis last_seen = 0;  // wall clock of its last announcement
};

struct ClusterInfo {
  std::vector<InstanceInfo> instances;  // sorted by id
  std::optional<Lease> leader;
};

// The announced instances and the lease, as stored.
StatusOr<ClusterInfo> ReadCluster(store::Store& store);

struct LeadershipOptions {
  std::string instance_id;
  std::string url;
  std::int64_t ttl_ms = 6'000;
  // The leader stops acting at ttl - margin after its last renewal began.
  // 0: ttl / 6.
  std::int64_t margin_ms = 0;
  // The store admits one process at a time (SQLite's PATH.lock): a lease
  // found on start was left by a dead process and is taken at once, whatever
  // instance id it names, and a renewal that is late never demotes (no one
  // else could take over).
  bool exclusive_store = false;
};

class Leadership final : public WriteFence {
 public:
  struct Callbacks {
    // Run on its own thread once this instance holds the lease: rebuild the
    // ledger and start scheduling. `Serving()` turns true when it returns
    // OK; a failure is treated as a lost lease.
    std::function<Status()> on_elected;
    // The lease is lost (or promotion failed); `why` says how. Called once.
    std::function<void(const std::string& why)> on_lost;
  };

  // `store`, `wall` and `monotonic` must outlive the Leadership. `monotonic`
  // is only compared with itself (a steady clock in production).
  Leadership(store::Store* store, const Clock* wall, const Clock* monotonic,
             LeadershipOptions options);
  ~Leadership() override;  // Stop()

  Leadership(const Leadership&) = delete;
  Leadership& operator=(const Leadership&) = delete;

  // One step: a follower reads the lease (and takes it when it is free,
  // left by an earlier run of this instance id, or unchanged for a ttl); a
  // leader renews it when due, or notices it lost it. Announces this
  // instance when due. Errors of the store are returned (and retried on
  // the next tick); FailedPrecondition once the lease is lost.
  Status Tick();

  // Runs Tick every ttl/6 on a thread, a watchdog that reports a lease not
  // renewed in time even while a Tick is stuck in the store, and the
  // promotion. Stop is idempotent.
  void Start(Callbacks callbacks);
  void Stop();
  // Hands the lease over (a clean shutdown): this instance stops acting
  // first, then marks the stored lease released if it still names this
  // instance and term, so a follower takes it on its next tick instead of
  // waiting a ttl. The caller must have stopped its leader work (nothing of
  // it commits afterwards: CheckInTxn refuses). Not the leader: OK, nothing
  // written. `on_lost` is not called.
  Status Resign();
  // Blocks until the first Tick is done and, if it made this instance the
  // leader, promotion has finished (or `timeout_ms` passed).
  void WaitSettled(std::int64_t timeout_ms);

  bool MayAct() const override;
  Status CheckInTxn(store::Txn& txn) const override;
  std::int64_t Term() const override;

  // Holds the lease (promotion may still be running).
  bool IsLeader() const;
  // Leader, promoted (ledger rebuilt) and allowed to act: serve the
  // ledger's requests locally.
  bool Serving() const;
  bool Lost() const;
  // The lease as last read or written (who to forward to).
  std::optional<Lease> KnownLeader() const;
  const std::string& id() const { return options_.instance_id; }
  const std::string& url() const { return url_; }
  // The advertised URL, when it is known only after binding (--listen with
  // port 0). REQUIRES: before Start and before the first Tick.
  void SetUrl(std::string url) { url_ = std::move(url); }
  std::int64_t ttl_ms() const { return options_.ttl_ms; }

 private:
  enum class State { kFollower, kLeader, kLost, kResigned };

  bool MayActAt(std::int64_t mono_now) const HF_REQUIRES(mu_);
  // Writes a new lease (term + 1) if the stored one is still `expected`.
  Status TryTake(const std::optional<std::string>& expected,
                 const std::optional<Lease>& previous);
  Status Renew();
  Status Announce();
  void MarkLost(const std::string& why);
  void TickLoop();
  void WatchdogLoop();
  void Promote();

  store::Store* const store_;
  const Clock* const wall_;
  const Clock* const mono_;
  const LeadershipOptions options_;
  const std::int64_t margin_ms_;
  std::string url_;

  Mutex tick_mu_;  // one Tick at a time
  mutable Mutex mu_;
  State state_ HF_GUARDED_BY(mu_) = State::kFollower;
  std::int64_t term_ HF_GUARDED_BY(mu_) = 0;
  std::int64_t renew_start_ HF_GUARDED_BY(mu_) = 0;  // monotonic
  std::optional<Lease> known_ HF_GUARDED_BY(mu_);
  std::optional<std::string> seen_raw_ HF_GUARDED_BY(mu_);
  std::int64_t seen_at_ HF_GUARDED_BY(mu_) = 0;  // monotonic
  bool first_tick_ HF_GUARDED_BY(mu_) = true;
  bool settled_ HF_GUARDED_BY(mu_) = false;
  bool promoting_ HF_GUARDED_BY(mu_) = false;
  std::int64_t last_announce_ HF_GUARDED_BY(mu_) = 0;  // monotonic
  bool announced_ HF_GUARDED_BY(mu_) = false;
  std::string lost_why_ HF_GUARDED_BY(mu_);
  bool lost_reported_ HF_GUARDED_BY(mu_) = false;
  std::atomic<bool> serving_{false};
  CondVar cv_;  // stop, settled
  bool stop_ HF_GUARDED_BY(mu_) = false;
  Callbacks callbacks_;
  std::thread ticker_;
  std::thread watchdog_;
  std::thread promoter_;
};

}  // namespace hf::server
