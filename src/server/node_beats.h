// NodeBeats: when each node was last heard from, and the report last
// applied for it, so that a heartbeat that only repeats that report (the
// common case: nothing on the node changed) is answered without a store
// write and without the control plane's mutex.
//
// A repeat is noted in memory: the node counts as heard from, and its
// heartbeat time is kept here; the node's stored row (last_heartbeat_at,
// report number) is written again only when the last write is older than
// `write_every` (plus up to 7/8 of it, spread by node id, so nodes that
// registered together are not all written together). GET
// /api/v1/nodes on the leader overlays the time kept here (LastBeatAt).
//
// What the control plane must do: Applied() after every report it applied
// (register or heartbeat), Forget() whenever its ledger is rebuilt from the
// store (start, promotion), Seen() for nodes it starts counting.
//
// Thread-safety: an internal mutex, never held across I/O; safe from any
// thread, with or without the control plane's mutex held (lock order:
// control plane mu_, then this).
#pragma once

#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/thread_annotations.h"
#include "store/store.h"
#include "wire/node_wire.h"

namespace hf::server {

class NodeBeats {
 public:
  explicit NodeBeats(store::Millis write_every) : write_every_(write_every) {}

  // `node` was heard from at `monotonic_now`.
  void Seen(store::RowId node, store::Millis monotonic_now);
  // Every node's last heard-from time (monotonic ms).
  std::vector<std::pair<store::RowId, store::Millis>> SeenTimes() const;

  // The report `report` was applied and `row` written at `wall_now`.
  void Applied(const wire::NodeReport& report, const store::NodeRow& row,
               store::Millis wall_now, store::Millis monotonic_now);

  // What to do with a heartbeat's report:
  // - kApply: it is not a repeat (or nothing is known of its node): apply
  //   it in full;
  // - kRepeat: it repeats the report last applied for its node (all but
  //   its number), numbered after it (or neither numbered), and the node's
  //   row was written recently (see above): noted
  //   (Seen, LastBeatAt, the newer number); `row` is the stored row;
  // - kRefresh: a repeat whose node row is due a write: the node counts as
  //   heard from; the caller writes `row` with the new time and number
  //   (no ledger change is needed) and calls Written, or applies the
  //   report in full when the stored row is not `row` any more.
  enum class Kind { kApply, kRepeat, kRefresh };
  struct Decision {
    Kind kind = Kind::kApply;
    store::NodeRow row;
  };
  Decision Classify(const wire::NodeReport& report, store::Millis wall_now,
                    store::Millis monotonic_now);
  // `report` (a kRefresh) was noted by writing the node's `row` again at
  // `wall_now`.
  void Written(const wire::NodeReport& report, const store::NodeRow& row,
               store::Millis wall_now);

  // The newest report number noted for `node_name` (applied or repeated),
  // if any: a report numbered at or before it is out of date even when
  // the stored row holds an older number.
  std::optional<wire::ReportNumber> NewestNumber(
      const std::string& node_name) const;

  // The wall time of the node's last heartbeat, when one was noted here
  // after its row was last written.
  std::optional<store::Millis> LastBeatAt(store::RowId node) const;

  // Forgets every applied report (not the heard-from times): the next
  // report of each node is applied in full.
  void Forget();

 private:
  struct Last {
    wire::NodeReport report;  // number cleared
    std::optional<wire::ReportNumber> number;
    store::NodeRow row;
    store::Millis written_at = 0;          // wall ms
    std::optional<store::Millis> beat_at;  // a repeat after the write
  };

  const store::Millis write_every_;
  mutable Mutex mu_;
  std::map<store::RowId, store::Millis> seen_ HF_GUARDED_BY(mu_);
  std::map<std::string, Last> last_ HF_GUARDED_BY(mu_);  // by name
  std::map<store::RowId, std::string> names_ HF_GUARDED_BY(mu_);
};

}  // namespace hf::server
