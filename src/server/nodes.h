// Nodes: node inventory and heartbeats (docs/CONTRACT.md sections 3 and 5).
// A node's agent registers it and heartbeats: each report's capabilities
// and health are taken afresh (the GPU rows in the store, then the
// ledger's inventory), a report that repeats the last one applied is
// answered from memory (NodeBeats) with its row written again only now
// and then, and a report older than the newest applied is refused. A
// heartbeat also carries the node's running tasks: one that holds no live
// slice gets a ledger-only slice pinned to the GPU it really uses (the
// compensation path), and the hook's reports of the others are recorded
// (SliceUsage; "hook" added to or taken from the slice's enforcement, with
// its history entry), together with the quotas their hook regions must
// hold.
//
// Thread-safety: safe from any thread. One registration of a node at a
// time (register_mu_, by the hash of its name; taken before the ledger's
// write gate), so its GPU rows reach the ledger in commit order without
// the ledger's lock held across the write. The other state it touches is
// its collaborators' (each with its own lock).
#pragma once

#include <array>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/clock.h"
#include "common/status.h"
#include "common/thread_annotations.h"
#include "server/guarded_ledger.h"
#include "server/identity.h"
#include "server/leader_writer.h"
#include "server/leadership.h"
#include "server/mig_channel.h"
#include "server/names.h"
#include "server/node_beats.h"
#include "server/scheduler_queue.h"
#include "server/slice_usage.h"
#include "server/telemetry.h"
#include "store/store.h"
#include "wire/node_wire.h"

namespace hf::server {

// What Nodes::Register made of a report.
struct AppliedNodeReport {
  store::NodeRow node;
  // Set when the report was older than the newest applied (nothing of it
  // was applied): that one's number.
  std::optional<wire::ReportNumber> newer_applied;
};

struct NodeView {
  store::NodeRow node;
  std::vector<store::GpuRow> gpus;
  bool hook_available = false;
};

struct NodesOptions {
  // The compute share a compensated slice gets when its task names none.
  int default_compute_percent = 50;
};

class Nodes {
 public:
  // Everything passed must outlive the Nodes; `fence` may be null (the
  // only instance).
  Nodes(store::Store* store, const Clock* clock, const Clock* monotonic,
        NodesOptions options, GuardedLedger* ledger, NodeBeats* beats,
        SliceUsage* usage, Names* names, SchedulerQueue* queue, MigChannel* mig,
        Telemetry* telemetry, const WriteFence* fence, LeaderWriter* writer)
      : store_(store),
        clock_(clock),
        monotonic_(monotonic),
        options_(options),
        ledger_(ledger),
        beats_(beats),
        usage_(usage),
        names_(names),
        queue_(queue),
        mig_(mig),
        telemetry_(telemetry),
        fence_(fence),
        writer_(writer) {}

  Nodes(const Nodes&) = delete;
  Nodes& operator=(const Nodes&) = delete;

  // The registered node `caller` may act for as its agent (a node token
  // bound to another node is refused; NotFound when not registered).
  StatusOr<store::NodeRow> NodeForAgent(const Caller& caller,
                                        const std::string& node);
  // Takes the node's capabilities and GPUs from the report, unless an
  // equal or newer numbered report was applied already.
  StatusOr<AppliedNodeReport> Register(const Caller& caller,
                                       const wire::NodeReport& report)
      HF_EXCLUDES(ledger_->mu());
  // Also records the hook reports of the tasks (the first report of an
  // attached hook adds "hook" to the slice's enforcement, with a
  // `hook_attached` history entry) and returns the quotas the tasks' hook
  // regions must hold.
  StatusOr<wire::HeartbeatReply> Heartbeat(
      const Caller& caller, const wire::NodeReport& report,
      const std::vector<wire::RunningTask>& tasks) HF_EXCLUDES(ledger_->mu());
  // Admin: every node with its GPUs as stored, its hook availability and
  // its last heartbeat (one answered from memory included).
  StatusOr<std::vector<NodeView>> List(const Caller& caller)
      HF_EXCLUDES(ledger_->mu());
  StatusOr<NodeView> Get(const Caller& caller, const std::string& name)
      HF_EXCLUDES(ledger_->mu());

 private:
  // What the store holds for the tasks a heartbeat reports running, in one
  // read without the ledger's lock (the common case: every task has its
  // slice, nothing else happens): the ones with no live slice, for the
  // compensation (each gets its slice: Compensate), and the ones of this
  // node with their live slice, for the hook reports.
  struct RunningRead {
    std::vector<store::TaskRow> without_slice;
    std::vector<std::pair<const wire::RunningTask*, store::SliceRow>> live;
  };
  StatusOr<RunningRead> ReadRunning(
      const store::NodeRow& node, const std::vector<wire::RunningTask>& tasks);
  // The compensation path: `task`, reported running on `node` without a
  // live slice, gets a ledger-only slice on the GPUs the report names
  // (reserved in the ledger, written without its lock, undone when not
  // written). A conflict is recorded in the history (`compensate_refused`).
  Status Compensate(const store::NodeRow& node, const wire::RunningTask& report,
                    const store::TaskRow& task) HF_EXCLUDES(ledger_->mu());
  // The hook part of a heartbeat, for the running tasks with their live
  // slices (ReadRunning). Takes no ledger lock.
  Status NoteHookReports(
      const store::NodeRow& node,
      const std::vector<std::pair<const wire::RunningTask*, store::SliceRow>>&
          live,
      wire::HeartbeatReply& reply);
  // Stores the in-memory usage of `slices` where it changed enough since
  // it was last stored.
  Status PersistHookUsage(const std::vector<store::RowId>& slices);

  store::Store* const store_;
  const Clock* const clock_;
  const Clock* const monotonic_;  // node silence; never jumps
  const NodesOptions options_;
  GuardedLedger* const ledger_;
  NodeBeats* const beats_;
  SliceUsage* const usage_;
  Names* const names_;
  SchedulerQueue* const queue_;
  MigChannel* const mig_;
  Telemetry* const telemetry_;
  const WriteFence* const fence_;
  LeaderWriter* const writer_;
  // One registration of a node at a time, by the hash of its name.
  std::array<Mutex, 64> register_mu_;
};

}  // namespace hf::server
