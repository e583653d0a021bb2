// The MIG profile tables and the profile choice over them. The tables are
// data transcribed from NVIDIA's documentation, each cited above it; the
// choice is a pure function over one table and the instances already on a
// GPU.
//
// Thread-safety: see mig_profiles.h (immutable tables, pure functions).
#include "gpu/mig_profiles.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <cstddef>
#include <initializer_list>
#include <string>
#include <utility>

namespace hf::gpu {
namespace {

constexpr MemoryMib kMibPerGb = 1024;

// One table row. Every placement of a profile covers its memory slices, so
// the placement size is the profile's memory-slice count (what `nvidia-smi
// mig -lgipp` prints after the colon).
MigProfile Row(std::string name, int profile_id, int compute_slices,
               int memory_slices, int memory_gb, int max_instances,
               std::initializer_list<int> starts) {
  MigProfile p;
  p.media_extensions = name.ends_with("+me");
  p.name = std::move(name);
  p.profile_id = profile_id;
  p.compute_slices = compute_slices;
  p.memory_slices = memory_slices;
  p.memory_mib = memory_gb * kMibPerGb;
  p.max_instances = max_instances;
  for (int start : starts) p.placements.push_back({start, memory_slices});
  return p;
}

MigModelTable Table(std::string model_key, int memory_gb, int compute_slices,
                    int memory_slices, std::vector<MigProfile> profiles,
                    std::string source) {
  return MigModelTable{std::move(model_key), memory_gb * kMibPerGb,
                       compute_slices,       memory_slices,
                       std::move(profiles),  std::move(source)};
}

// Sources, referred to by letter below:
//
// [G] NVIDIA Multi-Instance GPU User Guide, section "Supported MIG Profiles"
//     (docs.nvidia.com/datacenter/tesla/mig-user-guide/
//     supported-mig-profiles.html, R580-era edition): profile names,
//     fraction of memory and SMs, and "Number of Instances Available" per
//     product.
// [P] The same guide, "Getting Started with MIG", `nvidia-smi mig -lgipp` on
//     an A100: profile IDs 19, 20, 15, 14, 9, 5, 0 with placements
//     {0..6}:1, {0..6}:1, {0,2,4,6}:2, {0,2,4}:2, {0,4}:4, {0}:4, {0}:8.
// [L] Published `nvidia-smi mig -lgip` / `-lgipp` listings on the named
//     card (A30 on driver 535; H100 80GB; H100 NVL on driver 560), which
//     show the profile IDs and placements for that card.
// [O] NVIDIA GPU Operator's default mig-parted configuration
//     (default-mig-parted-config), whose comments group cards with the same
//     profile set: "H100-80GB, H800-80GB, A100-80GB, A800-80GB",
//     "A100-40GB, A800-40GB", "H100 NVL, H800 NVL", "H100-96GB, PG506-96GB,
//     GH200, H20", "H200-141GB, H200 NVL".
//
// Not found: profile tables for H800 and H20 in [G] (they are mapped to the
// tables [O] groups them with); `-lgipp` listings for H100 96GB, H200 and
// B200 (see those tables); any MIG table for GH200 144GB HBM3e, GB200 or
// B300, which are therefore absent.
std::vector<MigModelTable> BuildTables() {
  std::vector<MigModelTable> tables;

  // A30 24GB. [G] "A30 MIG Profiles" table (4 compute and 4 memory slices;
  // fractions 1/4, 2/4, full). IDs and placements: [L] on an A30 (lgip IDs
  // 14, 21, 5, 6, 0; lgipp {0,1,2,3}:1, {0,1,2,3}:1, {0,2}:2, {0,2}:2,
  // {0}:4). [G]: 1g.6gb+me needs R470+, 2g.12gb+me R525+.
  // clang-format off
  tables.push_back(Table("A30-24GB", 24, 4, 4, {
      //   name          id  g  mem  GB  max  starts
      Row("1g.6gb",      14, 1, 1,   6,  4,   {0, 1, 2, 3}),
      Row("1g.6gb+me",   21, 1, 1,   6,  1,   {0, 1, 2, 3}),
      Row("2g.12gb",      5, 2, 2,  12,  2,   {0, 2}),
      Row("2g.12gb+me",   6, 2, 2,  12,  1,   {0, 2}),
      Row("4g.24gb",      0, 4, 4,  24,  1,   {0}),
  }, "NVIDIA MIG User Guide, Supported MIG Profiles: A30 MIG Profiles; "
     "IDs and placements from nvidia-smi mig -lgip/-lgipp on an A30"));
  // clang-format on

  // A100 40GB (SXM4 and PCIe). [G] "A100 MIG Profiles" table for
  // A100-SXM4-40GB; IDs and placements [P]. [G] lists 1g.10gb with memory
  // fraction 1/8, but [P] places it on two memory slices ({0,2,4,6}:2) and
  // [G] allows 4 instances, so it is recorded as 2 slices. [G]: 1g.5gb+me
  // needs R470+, 1g.10gb R525+.
  // clang-format off
  tables.push_back(Table("A100-40GB", 40, 7, 8, {
      //   name          id  g  mem  GB  max  starts
      Row("1g.5gb",      19, 1, 1,   5,  7,   {0, 1, 2, 3, 4, 5, 6}),
      Row("1g.5gb+me",   20, 1, 1,   5,  1,   {0, 1, 2, 3, 4, 5, 6}),
      Row("1g.10gb",     15, 1, 2,  10,  4,   {0, 2, 4, 6}),
      Row("2g.10gb",     14, 2, 2,  10,  3,   {0, 2, 4}),
      Row("3g.20gb",      9, 3, 4,  20,  2,   {0, 4}),
      Row("4g.20gb",      5, 4, 4,  20,  1,   {0}),
      Row("7g.40gb",      0, 7, 8,  40,  1,   {0}),
  }, "NVIDIA MIG User Guide, Supported MIG Profiles: A100 MIG Profiles "
     "(A100-SXM4-40GB); placements from its nvidia-smi mig -lgipp example"));
  // clang-format on

  // A100 80GB (SXM4 and PCIe). [G] gives no separate table: "For
  // A100-SXM4-80GB, the profile names will change according to the memory
  // proportion - for example, 1g.10gb, 1g.10gb+me, 1g.20gb, 2g.20gb,
  // 3g.40gb, 4g.40gb, 7g.80gb respectively", i.e. the 40GB geometry with
  // memory doubled. IDs and placements as [P]; [O] groups it with H100-80GB.
  // clang-format off
  tables.push_back(Table("A100-80GB", 80, 7, 8, {
      //   name          id  g  mem  GB  max  starts
      Row("1g.10gb",     19, 1, 1,  10,  7,   {0, 1, 2, 3, 4, 5, 6}),
      Row("1g.10gb+me",  20, 1, 1,  10,  1,   {0, 1, 2, 3, 4, 5, 6}),
      Row("1g.20gb",     15, 1, 2,  20,  4,   {0, 2, 4, 6}),
      Row("2g.20gb",     14, 2, 2,  20,  3,   {0, 2, 4}),
      Row("3g.40gb",      9, 3, 4,  40,  2,   {0, 4}),
      Row("4g.40gb",      5, 4, 4,  40,  1,   {0}),
      Row("7g.80gb",      0, 7, 8,  80,  1,   {0}),
  }, "NVIDIA MIG User Guide, Supported MIG Profiles: A100 MIG Profiles "
     "(80GB naming note); placements from its nvidia-smi mig -lgipp example"));
  // clang-format on

  // H100 80GB (SXM5 and PCIe; also H800 80GB per [O]). [G] "H100 MIG
  // Profiles", first table. IDs and placements: [L] lgipp on an H100 80GB,
  // identical to [P].
  // clang-format off
  tables.push_back(Table("H100-80GB", 80, 7, 8, {
      //   name          id  g  mem  GB  max  starts
      Row("1g.10gb",     19, 1, 1,  10,  7,   {0, 1, 2, 3, 4, 5, 6}),
      Row("1g.10gb+me",  20, 1, 1,  10,  1,   {0, 1, 2, 3, 4, 5, 6}),
      Row("1g.20gb",     15, 1, 2,  20,  4,   {0, 2, 4, 6}),
      Row("2g.20gb",     14, 2, 2,  20,  3,   {0, 2, 4}),
      Row("3g.40gb",      9, 3, 4,  40,  2,   {0, 4}),
      Row("4g.40gb",      5, 4, 4,  40,  1,   {0}),
      Row("7g.80gb",      0, 7, 8,  80,  1,   {0}),
  }, "NVIDIA MIG User Guide, Supported MIG Profiles: H100 MIG Profiles "
     "(H100 80GB); placements from nvidia-smi mig -lgipp on an H100 80GB"));
  // clang-format on

  // H100 94GB (H100 NVL, PCIe and SXM5; also H800 NVL per [O]). [G] "H100
  // MIG Profiles", 94GB table. IDs and placements: [L] lgip/lgipp on an
  // H100 NVL (IDs 19, 20, 15, 14, 9, 5, 0; placements as [P]).
  // clang-format off
  tables.push_back(Table("H100-94GB", 94, 7, 8, {
      //   name          id  g  mem  GB  max  starts
      Row("1g.12gb",     19, 1, 1,  12,  7,   {0, 1, 2, 3, 4, 5, 6}),
      Row("1g.12gb+me",  20, 1, 1,  12,  1,   {0, 1, 2, 3, 4, 5, 6}),
      Row("1g.24gb",     15, 1, 2,  24,  4,   {0, 2, 4, 6}),
      Row("2g.24gb",     14, 2, 2,  24,  3,   {0, 2, 4}),
      Row("3g.47gb",      9, 3, 4,  47,  2,   {0, 4}),
      Row("4g.47gb",      5, 4, 4,  47,  1,   {0}),
      Row("7g.94gb",      0, 7, 8,  94,  1,   {0}),
  }, "NVIDIA MIG User Guide, Supported MIG Profiles: H100 MIG Profiles "
     "(H100 94GB); placements from nvidia-smi mig -lgipp on an H100 NVL"));
  // clang-format on

  // H100 96GB (H100 on GH200; also H20 per [O]). [G] "H100 MIG Profiles",
  // 96GB table. No -lgip/-lgipp listing for this card was found: profile IDs
  // are unknown (-1) and the placements are inferred from the H100 80GB/NVL
  // geometry, which has the same memory fractions in [G]
  // (1/8, 1/8, 2/8, 2/8, 4/8, 4/8, full). Not confirmed on hardware.
  // clang-format off
  tables.push_back(Table("H100-96GB", 96, 7, 8, {
      //   name          id  g  mem  GB  max  starts
      Row("1g.12gb",     -1, 1, 1,  12,  7,   {0, 1, 2, 3, 4, 5, 6}),
      Row("1g.12gb+me",  -1, 1, 1,  12,  1,   {0, 1, 2, 3, 4, 5, 6}),
      Row("1g.24gb",     -1, 1, 2,  24,  4,   {0, 2, 4, 6}),
      Row("2g.24gb",     -1, 2, 2,  24,  3,   {0, 2, 4}),
      Row("3g.48gb",     -1, 3, 4,  48,  2,   {0, 4}),
      Row("4g.48gb",     -1, 4, 4,  48,  1,   {0}),
      Row("7g.96gb",     -1, 7, 8,  96,  1,   {0}),
  }, "NVIDIA MIG User Guide, Supported MIG Profiles: H100 MIG Profiles "
     "(H100 96GB); placements inferred from the H100 geometry, IDs unknown"));
  // clang-format on

  // H200 141GB (SXM5 and NVL). [G] "H200 MIG Profiles". No -lgip/-lgipp
  // listing was found: IDs unknown (-1), placements inferred from the H100
  // geometry (same memory fractions in [G]). Not confirmed on hardware.
  // clang-format off
  tables.push_back(Table("H200-141GB", 141, 7, 8, {
      //   name          id  g  mem  GB  max  starts
      Row("1g.18gb",     -1, 1, 1,  18,  7,   {0, 1, 2, 3, 4, 5, 6}),
      Row("1g.18gb+me",  -1, 1, 1,  18,  1,   {0, 1, 2, 3, 4, 5, 6}),
      Row("1g.35gb",     -1, 1, 2,  35,  4,   {0, 2, 4, 6}),
      Row("2g.35gb",     -1, 2, 2,  35,  3,   {0, 2, 4}),
      Row("3g.71gb",     -1, 3, 4,  71,  2,   {0, 4}),
      Row("4g.71gb",     -1, 4, 4,  71,  1,   {0}),
      Row("7g.141gb",    -1, 7, 8, 141,  1,   {0}),
  }, "NVIDIA MIG User Guide, Supported MIG Profiles: H200 MIG Profiles; "
     "placements inferred from the H100 geometry, IDs unknown"));
  // clang-format on

  // B200 180GB. [G] "B200 MIG Profiles" (memory fractions 1/8, 1/8, 2/8,
  // 2/8, 4/8, 4/8, full; SMs in sevenths). No -lgip/-lgipp listing was
  // found: IDs unknown (-1), placements inferred from the H100 geometry. Not
  // confirmed on hardware.
  // clang-format off
  tables.push_back(Table("B200-180GB", 180, 7, 8, {
      //   name          id  g  mem  GB  max  starts
      Row("1g.23gb",     -1, 1, 1,  23,  7,   {0, 1, 2, 3, 4, 5, 6}),
      Row("1g.23gb+me",  -1, 1, 1,  23,  1,   {0, 1, 2, 3, 4, 5, 6}),
      Row("1g.45gb",     -1, 1, 2,  45,  4,   {0, 2, 4, 6}),
      Row("2g.45gb",     -1, 2, 2,  45,  3,   {0, 2, 4}),
      Row("3g.90gb",     -1, 3, 4,  90,  2,   {0, 4}),
      Row("4g.90gb",     -1, 4, 4,  90,  1,   {0}),
      Row("7g.180gb",    -1, 7, 8, 180,  1,   {0}),
  }, "NVIDIA MIG User Guide, Supported MIG Profiles: B200 MIG Profiles; "
     "placements inferred from the H100 geometry, IDs unknown"));
  // clang-format on

  return tables;
}

std::string ToLower(std::string_view s) {
  std::string out(s);
  for (char& c : out) {
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  return out;
}

// Lower-case words of a model name: "NVIDIA A100-SXM4-80GB" ->
// {"nvidia", "a100", "sxm4", "80gb"}.
std::vector<std::string> Words(std::string_view model) {
  std::vector<std::string> words;
  std::string current;
  for (char c : model) {
    if (std::isalnum(static_cast<unsigned char>(c)) != 0) {
      current.push_back(
          static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
    } else if (!current.empty()) {
      words.push_back(std::move(current));
      current.clear();
    }
  }
  if (!current.empty()) words.push_back(std::move(current));
  return words;
}

bool HasWord(const std::vector<std::string>& words, std::string_view word) {
  return std::find(words.begin(), words.end(), word) != words.end();
}

// The "<n>gb" size word in a model name, or 0.
int SizeWordGb(const std::vector<std::string>& words) {
  for (const std::string& w : words) {
    if (w.size() < 3 || !w.ends_with("gb")) continue;
    int gb = 0;
    bool digits = true;
    for (std::size_t i = 0; i + 2 < w.size(); ++i) {
      if (std::isdigit(static_cast<unsigned char>(w[i])) == 0) {
        digits = false;
        break;
      }
      gb = gb * 10 + (w[i] - '0');
      if (gb > 100000) break;
    }
    if (digits) return gb;
  }
  return 0;
}

constexpr MemoryMib Gib(int gib) { return MemoryMib{gib} * kMibPerGb; }

// A100 / A800: 40 or 80 GB.
const MigModelTable* FindA100(int size_gb, MemoryMib total_memory_mib) {
  if (size_gb == 40) return MigTableByKey("A100-40GB");
  if (size_gb == 80) return MigTableByKey("A100-80GB");
  if (total_memory_mib <= 0) return nullptr;
  // Reported totals sit a little under nominal (40537 MiB on a 40GB card).
  return MigTableByKey(total_memory_mib >= Gib(60) ? "A100-80GB" : "A100-40GB");
}

// H100 / H800: 80, 94 (NVL) or 96 GB.
const MigModelTable* FindH100(const std::vector<std::string>& words,
                              int size_gb, MemoryMib total_memory_mib) {
  if (HasWord(words, "nvl")) return MigTableByKey("H100-94GB");
  if (size_gb == 80) return MigTableByKey("H100-80GB");
  if (size_gb == 94) return MigTableByKey("H100-94GB");
  if (size_gb == 96) return MigTableByKey("H100-96GB");
  if (total_memory_mib <= 0) return nullptr;
  // An H100 NVL reports 95830 MiB, an H100 80GB about 81559 MiB.
  if (total_memory_mib <= Gib(88)) return MigTableByKey("H100-80GB");
  if (total_memory_mib <= Gib(95)) return MigTableByKey("H100-94GB");
  return MigTableByKey("H100-96GB");
}

// "1-3", or "5" for a one-slot placement.
std::string SlotRange(const MigPlacement& p) {
  if (p.size == 1) return std::to_string(p.start);
  return std::to_string(p.start) + "-" + std::to_string(p.end());
}

// "a", "a and b", "a, b and c".
std::string JoinAnd(const std::vector<std::string>& parts) {
  std::string out;
  for (std::size_t i = 0; i < parts.size(); ++i) {
    if (i > 0) out += (i + 1 == parts.size()) ? " and " : ", ";
    out += parts[i];
  }
  return out;
}

std::string DescribeRequest(std::optional<MemoryMib> memory_mib,
                            std::optional<ComputePercent> compute_percent) {
  std::vector<std::string> parts;
  if (memory_mib) parts.push_back(std::to_string(*memory_mib) + " MB");
  if (compute_percent) {
    parts.push_back(std::to_string(*compute_percent) + "% compute");
  }
  return JoinAnd(parts);
}

// Fewest memory slices first, then fewest compute slices: the order in which
// profiles are tried, so the smallest adequate partition is used.
bool SmallerProfile(const MigProfile* a, const MigProfile* b) {
  if (a->memory_slices != b->memory_slices) {
    return a->memory_slices < b->memory_slices;
  }
  if (a->compute_slices != b->compute_slices) {
    return a->compute_slices < b->compute_slices;
  }
  return a->memory_mib < b->memory_mib;
}

int CountInstances(const std::vector<MigInstance>& existing,
                   std::string_view profile) {
  return static_cast<int>(std::count_if(
      existing.begin(), existing.end(),
      [&](const MigInstance& i) { return i.profile == profile; }));
}

bool IsFree(const MigPlacement& candidate,
            const std::vector<MigInstance>& existing) {
  return std::none_of(
      existing.begin(), existing.end(),
      [&](const MigInstance& i) { return i.placement.Overlaps(candidate); });
}

// Whether `existing` leaves `profile` an instance of its own (counted only
// where the instances could reach its limit).
bool UnderInstanceLimit(const MigProfile& profile,
                        const std::vector<MigInstance>& existing) {
  return static_cast<int>(existing.size()) < profile.max_instances ||
         CountInstances(existing, profile.name) < profile.max_instances;
}

bool BoundsValid(std::optional<MemoryMib> memory_mib,
                 std::optional<ComputePercent> compute_percent) {
  if (!memory_mib && !compute_percent) return false;
  if (memory_mib && *memory_mib <= 0) return false;
  return !compute_percent ||
         (*compute_percent >= 1 && *compute_percent <= kFullComputePercent);
}

// The profiles (no "+me") covering the request, smallest first, equal ones
// in table order, written to `out` (room for table.profiles.size()); returns
// how many. `largest`, where given, gets the largest profile without "+me".
std::size_t QualifyingProfiles(const MigModelTable& table,
                               std::optional<MemoryMib> memory_mib,
                               std::optional<ComputePercent> compute_percent,
                               std::optional<MemoryMib> card_memory_mib,
                               const MigProfile** out,
                               const MigProfile** largest) {
  std::size_t n = 0;
  for (const MigProfile& profile : table.profiles) {
    if (profile.media_extensions) continue;
    if (largest != nullptr &&
        (*largest == nullptr || SmallerProfile(*largest, &profile))) {
      *largest = &profile;
    }
    if (memory_mib &&
        MigProfileMemory(table, profile, card_memory_mib) < *memory_mib) {
      continue;
    }
    if (compute_percent &&
        MigComputePercent(table, profile) < *compute_percent) {
      continue;
    }
    // Insertion sort (a table has a few profiles), stable as
    // std::stable_sort is, without its buffer.
    std::size_t j = n++;
    for (; j > 0 && SmallerProfile(&profile, out[j - 1]); --j) {
      out[j] = out[j - 1];
    }
    out[j] = &profile;
  }
  return n;
}

// The first of `fitting` (in order) with an instance to spare and a free
// placement, at its lowest such placement.
std::optional<MigFit> FirstFree(const MigProfile* const* fitting,
                                std::size_t count,
                                const std::vector<MigInstance>& existing) {
  for (std::size_t i = 0; i < count; ++i) {
    const MigProfile& profile = *fitting[i];
    if (!UnderInstanceLimit(profile, existing)) continue;
    for (const MigPlacement& placement : profile.placements) {
      if (IsFree(placement, existing)) return MigFit{&profile, placement};
    }
  }
  return std::nullopt;
}

}  // namespace

const std::vector<MigModelTable>& AllMigTables() {
  static const std::vector<MigModelTable> tables = BuildTables();
  return tables;
}

const MigModelTable* MigTableByKey(std::string_view key) {
  for (const MigModelTable& table : AllMigTables()) {
    if (table.model_key == key) return &table;
  }
  return nullptr;
}

const MigModelTable* FindMigTable(std::string_view model,
                                  MemoryMib total_memory_mib) {
  const std::vector<std::string> words = Words(model);
  const int size_gb = SizeWordGb(words);
  if (HasWord(words, "a30")) return MigTableByKey("A30-24GB");
  if (HasWord(words, "a100") || HasWord(words, "a800")) {
    return FindA100(size_gb, total_memory_mib);
  }
  // "GH200 480GB" names the superchip's system memory, not the GPU's; only
  // the 96GB variant has a table in the guide.
  if (HasWord(words, "gh200")) {
    if (total_memory_mib > 0 && total_memory_mib <= Gib(100)) {
      return MigTableByKey("H100-96GB");
    }
    return nullptr;
  }
  if (HasWord(words, "h100") || HasWord(words, "h800")) {
    return FindH100(words, size_gb, total_memory_mib);
  }
  if (HasWord(words, "h20")) return MigTableByKey("H100-96GB");
  if (HasWord(words, "h200")) return MigTableByKey("H200-141GB");
  if (HasWord(words, "b200")) return MigTableByKey("B200-180GB");
  return nullptr;
}

const MigProfile* FindProfile(const MigModelTable& table,
                              std::string_view name) {
  std::string wanted = ToLower(name);
  if (wanted.starts_with("mig ")) wanted.erase(0, 4);
  for (const MigProfile& profile : table.profiles) {
    if (profile.name == wanted) return &profile;
  }
  return nullptr;
}

ComputePercent MigComputePercent(const MigModelTable& table,
                                 const MigProfile& profile) {
  if (table.compute_slices <= 0) return 0;
  return static_cast<ComputePercent>(
      profile.compute_slices * kFullComputePercent / table.compute_slices);
}

bool IsLegalPlacement(const MigModelTable& table, std::string_view profile,
                      MigPlacement placement) {
  const MigProfile* p = FindProfile(table, profile);
  if (p == nullptr) return false;
  return std::find(p->placements.begin(), p->placements.end(), placement) !=
         p->placements.end();
}

MemoryMib MigProfileMemory(const MigModelTable& table,
                           const MigProfile& profile,
                           std::optional<MemoryMib> card_memory_mib) {
  if (!card_memory_mib || table.memory_slices <= 0) return profile.memory_mib;
  return std::min<MemoryMib>(
      profile.memory_mib,
      *card_memory_mib * profile.memory_slices / table.memory_slices);
}

StatusOr<MigInstance> ChooseMigInstance(
    const MigModelTable& table, std::optional<MemoryMib> memory_mib,
    std::optional<ComputePercent> compute_percent,
    const std::vector<MigInstance>& existing,
    std::optional<MemoryMib> card_memory_mib) {
  if (!memory_mib && !compute_percent) {
    return Status::InvalidArgument(
        "a MIG slice needs a memory size or a compute percent");
  }
  if (memory_mib && *memory_mib <= 0) {
    return Status::InvalidArgument("MIG slice memory must be positive, got " +
                                       std::to_string(*memory_mib) + " MB",
                                   "gpu_memory_mb");
  }
  if (compute_percent &&
      (*compute_percent < 1 || *compute_percent > kFullComputePercent)) {
    return Status::InvalidArgument("MIG slice compute must be 1..100%, got " +
                                       std::to_string(*compute_percent) + "%",
                                   "gpu_compute_ratio");
  }

  std::vector<const MigProfile*> fitting(table.profiles.size());
  const MigProfile* largest = nullptr;
  fitting.resize(QualifyingProfiles(table, memory_mib, compute_percent,
                                    card_memory_mib, fitting.data(), &largest));
  if (fitting.empty()) {
    std::string message = "no MIG profile on " + table.model_key + " has " +
                          DescribeRequest(memory_mib, compute_percent);
    if (largest != nullptr) {
      message += " (the largest, " + largest->name + ", has " +
                 std::to_string(largest->memory_mib) + " MB and " +
                 std::to_string(MigComputePercent(table, *largest)) +
                 "% compute)";
    }
    return Status::ResourceExhausted(std::move(message));
  }
  if (const std::optional<MigFit> fit =
          FirstFree(fitting.data(), fitting.size(), existing)) {
    return MigInstance{fit->profile->name, fit->placement};
  }

  // Nothing placed: explain with the smallest qualifying profile.
  const MigProfile& smallest = *fitting.front();
  std::string message = "no free placement for " + smallest.name + " on " +
                        table.model_key + ": ";
  const bool some_slot_free =
      std::any_of(smallest.placements.begin(), smallest.placements.end(),
                  [&](const MigPlacement& p) { return IsFree(p, existing); });
  if (some_slot_free) {
    // Only the instance limit stands in the way (a "+me"-like profile).
    message += "all " + std::to_string(smallest.max_instances) +
               " of its instances are in use";
  } else {
    std::vector<std::string> ranges;
    for (const MigPlacement& placement : smallest.placements) {
      ranges.push_back(SlotRange(placement));
    }
    const bool one_slot =
        ranges.size() == 1 && smallest.placements.front().size == 1;
    message += (one_slot ? "slot " : "slots ") + JoinAnd(ranges) + " taken";
  }
  if (fitting.size() > 1) {
    message += "; no larger profile that fits has a free placement either";
  }
  return Status::ResourceExhausted(std::move(message));
}

std::optional<MigFit> FitMigInstance(
    const MigModelTable& table, std::optional<MemoryMib> memory_mib,
    std::optional<ComputePercent> compute_percent,
    const std::vector<MigInstance>& existing,
    std::optional<MemoryMib> card_memory_mib) {
  if (!BoundsValid(memory_mib, compute_percent)) return std::nullopt;
  // Every slice admission on a GPU in MIG mode comes here (a node scan
  // checks many): no allocation for a table of up to kInline profiles.
  constexpr std::size_t kInline = 32;
  std::array<const MigProfile*, kInline> inline_buffer{};
  std::vector<const MigProfile*> heap_buffer;
  const MigProfile** buffer = inline_buffer.data();
  if (table.profiles.size() > kInline) {
    heap_buffer.resize(table.profiles.size());
    buffer = heap_buffer.data();
  }
  const std::size_t count =
      QualifyingProfiles(table, memory_mib, compute_percent, card_memory_mib,
                         buffer, /*largest=*/nullptr);
  return FirstFree(buffer, count, existing);
}

}  // namespace hf::gpu
