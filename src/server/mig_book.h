// MigBook: what the control plane knows of the MIG partitions on the
// cards, as the agents report them, and which MIG GPUs take no new gold
// slice because of it:
// - a GPU that holds partitions no live slice owns (and no MIG command in
//   flight is about to own) keeps them until someone destroys them; they
//   take the card's capacity, so nothing new is placed there meanwhile;
// - a GPU where the last create found no room takes no gold slice until
//   its reported partitions change (or kMigFullMillis pass): the ledger's
//   geometry thought it fit, the card said no.
// Orphaned partitions are recorded once each (MIG_PARTITION_ORPHANED in the
// history); the set already recorded is kept in the store's meta
// (kMigOrphansNotedKey) so a restart does not record them again: NoteReport
// returns the text to store when it changed, LoadNoted reads it back.
//
// Thread-safety: an internal mutex, a leaf (never held across I/O); safe
// from any thread, with or without the control plane's mutex held (lock
// order: control plane mu_, then this).
#pragma once

#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "common/thread_annotations.h"
#include "server/names.h"
#include "store/store.h"

namespace hf::server {

class MigBook {
 public:
  // Reads back the partitions recorded as orphaned (the meta's text, as
  // NoteReport gave it). What does not read is dropped: noted afresh.
  void LoadNoted(const std::string& text);

  // A heartbeat of `node` reported these partitions per MIG GPU (index ->
  // device UUIDs). `owned`: the devices live slices or MIG commands in
  // flight own; `creating`: GPUs with a create in flight (their orphans
  // cannot be told yet).
  struct Noted {
    // Orphans not recorded before: (GPU index, device UUID).
    std::vector<std::pair<int, std::string>> fresh;
    // The recorded set to store (kMigOrphansNotedKey), when it changed.
    std::optional<std::string> noted;
  };
  Noted NoteReport(store::RowId node,
                   const std::map<int, std::vector<std::string>>& reported,
                   const std::set<std::string>& owned,
                   const std::set<int>& creating);

  // A create on `gpu` found no room: no gold slice lands there until its
  // reported partitions change or `until` (monotonic ms) passes.
  void MarkFull(const GpuKey& gpu, store::Millis until);

  // Why no gold slice may land on `gpu` at `now` (monotonic ms); "" when
  // one may.
  std::string Blocked(const GpuKey& gpu, store::Millis now) const;
  // Every GPU that takes no new gold slice at `now`, with why (as Blocked
  // says); one look for a whole placement (cheap when none).
  std::map<GpuKey, std::string> AllBlocked(store::Millis now) const;

 private:
  struct Full {
    std::vector<std::string> devices;  // as reported when it had no room
    store::Millis until = 0;
  };

  std::string NotedTextLocked() const HF_REQUIRES(mu_);
  std::string BlockedLocked(const GpuKey& gpu, store::Millis now) const
      HF_REQUIRES(mu_);

  mutable Mutex mu_;
  // Device UUID -> its GPU, for every partition recorded as orphaned.
  std::map<std::string, GpuKey> noted_ HF_GUARDED_BY(mu_);
  // Per MIG GPU: the partitions last reported, those no one owns, and
  // (after a create found no room) what was reported then.
  std::map<GpuKey, std::vector<std::string>> reported_ HF_GUARDED_BY(mu_);
  std::map<GpuKey, std::set<std::string>> orphans_ HF_GUARDED_BY(mu_);
  std::map<GpuKey, Full> full_ HF_GUARDED_BY(mu_);
};

}  // namespace hf::server
