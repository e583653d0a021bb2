// The MIG profile tables: for each MIG-capable NVIDIA GPU model, the GPU
// instance profiles it offers, their size in compute and memory slices, and
// the memory slots where each may legally start (docs/CONTRACT.md section 8).
// This is the one place these facts live: the simulated GPU driver builds its
// MIG behaviour from these tables and the scheduler picks profiles from them,
// so the two can never disagree about what a card can do.
//
// Sources are NVIDIA's MIG User Guide and published `nvidia-smi mig -lgip` /
// `-lgipp` listings; mig_profiles.cc cites them above each table and says
// where a fact was not found.
//
// Memory convention: a profile's `memory_mib` is the GB figure in its name
// times 1024 ("1g.10gb" -> 10240 MiB), and a table's `memory_mib` is the
// card's nominal size the same way (80 GB -> 81920 MiB). The driver reports
// less usable memory than the nominal figure (`nvidia-smi mig -lgip` shows
// 1g.12gb on an H100 NVL as 10.75 GiB), so a task that needs every last MiB
// of a profile should ask for the next one up.
//
// Thread-safety: the tables are immutable after first use (built once, under
// the C++ static-initialisation guarantee); every function here is pure and
// safe to call from any thread.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/quantity.h"
#include "common/status.h"

namespace hf::gpu {

// Where a GPU instance sits: `size` memory slices starting at slot `start`
// (NVML's nvmlGpuInstancePlacement_t; nvidia-smi prints it as start:size).
struct MigPlacement {
  int start = 0;
  int size = 0;

  // The last memory slot the placement covers.
  int end() const { return start + size - 1; }
  bool Overlaps(const MigPlacement& other) const {
    return start <= other.end() && other.start <= end();
  }

  friend bool operator==(const MigPlacement&, const MigPlacement&) = default;
};

struct MigProfile {
  std::string name;  // e.g. "1g.10gb", "1g.10gb+me", "3g.40gb"
  // The GPU instance profile ID as NVML reports it
  // (nvmlGpuInstanceProfileInfo_t::id, the ID column of `nvidia-smi mig
  // -lgip`), e.g. 19 for 1g.10gb on an A100. -1 where no published listing
  // for the model was found.
  int profile_id = -1;
  int compute_slices = 0;    // the "g" count
  int memory_slices = 0;     // out of the table's memory_slices
  MemoryMib memory_mib = 0;  // nominal, see the file comment
  int max_instances = 0;     // "Number of Instances Available" in the guide
  // A "+me" profile: carries the card's media engines, at most one per GPU.
  // Listed for completeness; the automatic choice never picks one.
  bool media_extensions = false;
  // Every legal placement, in ascending start order.
  std::vector<MigPlacement> placements;
};

struct MigModelTable {
  std::string model_key;     // e.g. "A100-80GB", used in messages
  MemoryMib memory_mib = 0;  // nominal card memory
  int compute_slices = 0;    // 7 on A100/H100/H200/B200, 4 on A30
  int memory_slices = 0;     // 8 on A100/H100/H200/B200, 4 on A30
  std::vector<MigProfile> profiles;
  std::string source;  // the document(s) the table was taken from
};

// One instance on a GPU: which profile, and where.
struct MigInstance {
  std::string profile;
  MigPlacement placement;

  friend bool operator==(const MigInstance&, const MigInstance&) = default;
};

// Every table the project knows, one per distinct MIG geometry.
const std::vector<MigModelTable>& AllMigTables();

// The table for a GPU model name as NVML or an inventory file spells it
// ("NVIDIA A100-SXM4-80GB", "NVIDIA A100 80GB PCIe", "A100-SXM4-40GB",
// "NVIDIA H100 80GB HBM3", "NVIDIA H100 NVL", "NVIDIA H200", "NVIDIA A30"),
// matched case-insensitively on whole words. Where one name covers several
// memory sizes (A100 40/80 GB, H100 80/94/96 GB) a size in the name wins,
// otherwise `total_memory_mib` (the card's total as reported) decides.
// Returns nullptr for a model without MIG or not in the tables (callers then
// must not offer the gold tier on that GPU). The pointer stays valid for the
// life of the process.
const MigModelTable* FindMigTable(std::string_view model,
                                  MemoryMib total_memory_mib);

// The table whose `model_key` is `key` ("A100-80GB"), or nullptr. For a GPU
// whose model name does not say which geometry it has (the simulator's
// anonymised models).
const MigModelTable* MigTableByKey(std::string_view key);

// The profile named `name` ("3g.40gb"; case-insensitive, an "MIG " prefix as
// nvidia-smi prints it is accepted), or nullptr.
const MigProfile* FindProfile(const MigModelTable& table,
                              std::string_view name);

// The share of the card's compute a profile gives: compute_slices /
// table.compute_slices in whole percent, rounded down (3g of 7 -> 42).
ComputePercent MigComputePercent(const MigModelTable& table,
                                 const MigProfile& profile);

// True when `placement` is one of the legal placements of `profile` on this
// table (start and size both match). Unknown profile: false.
bool IsLegalPlacement(const MigModelTable& table, std::string_view profile,
                      MigPlacement placement);

// Chooses the profile and placement for a slice request on a GPU that already
// holds `existing` instances.
//
// The profile is the smallest (fewest memory slices, then fewest compute
// slices) non-"+me" profile whose memory_mib >= `memory_mib` and whose
// MigComputePercent >= `compute_percent` (an absent bound is no constraint).
// It is placed at the lowest legal start whose memory slots overlap no
// existing instance, and where it has no such start (or its max_instances
// are in use) the next larger qualifying profile is tried.
//
// Returns InvalidArgument when both bounds are absent or a bound is out of
// range (memory <= 0, percent outside 1..100); ResourceExhausted when no
// profile on the model is large enough ("no MIG profile on A100-80GB has
// 90000 MB ...") or none of the qualifying profiles has a free placement
// ("no free placement for 3g.40gb on A100-80GB: slots 0-3 and 4-7 taken").
//
// With `card_memory_mib` (the card's memory as the driver reports it), a
// profile holds what its memory slices really are on that card: the lesser
// of its nominal size and card_memory_mib * memory_slices /
// table.memory_slices (MigProfileMemory). On an H100 with 81559 MB a
// 4g.40gb then holds 40779 MB, so a 40960 MB request gets a 7g.80gb.
StatusOr<MigInstance> ChooseMigInstance(
    const MigModelTable& table, std::optional<MemoryMib> memory_mib,
    std::optional<ComputePercent> compute_percent,
    const std::vector<MigInstance>& existing,
    std::optional<MemoryMib> card_memory_mib = std::nullopt);

// ChooseMigInstance's choice as the table's profile and the placement, or
// nullopt where it returns an error: the same choice without building the
// instance or the error's message, for admission checks, which run it for
// every GPU in MIG mode a placement considers.
struct MigFit {
  const MigProfile* profile = nullptr;
  MigPlacement placement;
};
std::optional<MigFit> FitMigInstance(
    const MigModelTable& table, std::optional<MemoryMib> memory_mib,
    std::optional<ComputePercent> compute_percent,
    const std::vector<MigInstance>& existing,
    std::optional<MemoryMib> card_memory_mib = std::nullopt);

// The memory a partition of `profile` holds on a card of `card_memory_mib`
// (see ChooseMigInstance); the nominal size without a card.
MemoryMib MigProfileMemory(const MigModelTable& table,
                           const MigProfile& profile,
                           std::optional<MemoryMib> card_memory_mib);

}  // namespace hf::gpu
