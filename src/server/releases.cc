// Releases (releases.h): a slice's release written in the store.
#include "server/releases.h"

#include <string>
#include <vector>

#include "server/internal.h"

namespace hf::server {

using store::TaskRow;
using store::Txn;

namespace {

// The profile of the create command that made `slice`'s partition (the
// destroy command names the same one), or "" when none is found.
StatusOr<std::string> CreatedMigProfile(Txn& txn,
                                        const store::SliceRow& slice) {
  store::SliceRequestFilter f;
  f.node_id = slice.node_id;
  f.state = store::SliceRequestState::kDone;
  f.limit = 1000;
  for (;;) {
    auto rows = txn.ListSliceRequests(f);
    if (!rows.ok()) return rows.status();
    for (const store::SliceRequestRow& row : *rows) {
      if (row.slice_id == slice.id && row.action == "create") {
        return row.profile;
      }
    }
    if (rows->size() < static_cast<size_t>(f.limit)) return std::string();
    f.after_id = rows->back().id;
  }
}

}  // namespace

Status Releases::ReleaseInTxn(Txn& txn, store::SliceRow& slice,
                              const std::string& actor,
                              const std::string& reason,
                              std::vector<store::RowId>& released) {
  if (slice.state != store::SliceState::kAllocated) return Status::Ok();
  telemetry_->NoteReleasePath(slice.id, ReleasePath(actor, reason));
  const store::Millis now = clock_->NowMillis();
  store::HistoryRow h = HistoryFor(slice, "release");
  h.at = now;
  h.actor = actor;
  h.reason = reason;
  if (slice.qos_level == "gold" && slice.mig_device_id.empty()) {
    // No partition exists yet. An unclaimed create is withdrawn and the
    // slice released now; a create the agent is executing is left to
    // finish, and its result writes the destroy (ReportSliceRequest).
    bool in_flight = false;
    store::SliceRequestFilter f;
    f.node_id = slice.node_id;
    HF_RETURN_IF_ERROR(ForEachOpenSliceRequest(
        txn, f, [&](store::SliceRequestRow& row) -> Status {
          if (row.slice_id != slice.id || row.action != "create") {
            return Status::Ok();
          }
          if (row.state == store::SliceRequestState::kPending) {
            row.state = store::SliceRequestState::kFailed;
            row.error =
                "withdrawn: the slice was released before the agent "
                "claimed the command";
            row.finished_at = now;
            return txn.UpdateSliceRequest(row);
          }
          in_flight = true;
          return Status::Ok();
        }));
    if (in_flight) {
      slice.state = store::SliceState::kReleasing;
      HF_RETURN_IF_ERROR(txn.UpdateSlice(slice));
      h.op = "release_requested";
      h.reason +=
          " (the MIG partition is being created; it is destroyed "
          "when the agent reports it)";
      return txn.AppendHistory(h).status();
    }
  }
  if (slice.qos_level == "gold" && !slice.mig_device_id.empty()) {
    // The partition holds its memory until the agent destroys it: the slice
    // stays accounted (releasing) until the destroy command succeeds.
    slice.state = store::SliceState::kReleasing;
    HF_RETURN_IF_ERROR(txn.UpdateSlice(slice));
    store::SliceRequestRow cmd = mig_->CommandFor(
        slice, "destroy", slice.gpu_indices.empty() ? 0 : slice.gpu_indices[0],
        now);
    auto profile = CreatedMigProfile(txn, slice);
    if (!profile.ok()) return profile.status();
    cmd.profile = *profile;
    cmd.device_id = slice.mig_device_id;
    HF_RETURN_IF_ERROR(txn.InsertSliceRequest(cmd).status());
    h.op = "release_requested";
    h.reason += " (waiting for the MIG partition to be destroyed)";
    return txn.AppendHistory(h).status();
  }
  slice.state = store::SliceState::kReleased;
  slice.released_at = now;
  HF_RETURN_IF_ERROR(txn.UpdateSlice(slice));
  HF_RETURN_IF_ERROR(txn.AppendHistory(h).status());
  released.push_back(slice.id);
  return Status::Ok();
}

Status Releases::ReleaseTaskSliceInTxn(Txn& txn, const TaskRow& task,
                                       const std::string& actor,
                                       const std::string& reason,
                                       std::vector<store::RowId>& released) {
  if (!task.slice_id) return Status::Ok();
  auto slice = txn.GetSlice(*task.slice_id);
  if (!slice.ok()) {
    return slice.status().code() == StatusCode::kNotFound ? Status::Ok()
                                                          : slice.status();
  }
  return ReleaseInTxn(txn, *slice, actor, reason, released);
}

}  // namespace hf::server
