// libFuzzer target: the simulated GPU backend's files (src/gpu/inventory.h),
// the inventory file an operator writes and the MIG state file the driver
// persists. The input is parsed as both.
//
// Checked: parsing never throws or crashes; an accepted inventory holds
// what docs/INVENTORY.md promises (indices are positions, a MIG table for
// every MIG-enabled GPU, legal non-overlapping instances, bounded numbers,
// unique UUIDs); an accepted state file survives a write and a re-read
// unchanged.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <string>
#include <string_view>

#include "gpu/inventory.h"

namespace {

void Fail(const char* what) {
  std::fprintf(stderr, "inventory_fuzz: %s\n", what);
  std::abort();
}

void CheckInventory(const hf::gpu::Inventory& inv) {
  if (inv.cpu_milli < 1 || inv.host_memory_mib < 1) Fail("node resources");
  std::set<std::string> uuids;
  for (std::size_t i = 0; i < inv.gpus.size(); ++i) {
    const hf::gpu::InventoryGpu& g = inv.gpus[i];
    if (g.index != static_cast<int>(i)) Fail("index is not the position");
    if (g.memory_mib < 1 || g.memory_mib > (std::int64_t{1} << 30)) {
      Fail("memory out of bounds");
    }
    if (g.cc_major < 0 || g.cc_major > 99 || g.cc_minor < 0 ||
        g.cc_minor > 99) {
      Fail("compute capability out of bounds");
    }
    if (!uuids.insert(g.uuid).second) Fail("duplicate UUID");
    if (g.mig_enabled != (g.mig_table != nullptr)) Fail("MIG table");
    if (!g.mig_enabled && !g.mig_instances.empty()) Fail("MIG instances");
    for (std::size_t a = 0; a < g.mig_instances.size(); ++a) {
      const hf::gpu::MigInstance& x = g.mig_instances[a];
      if (!hf::gpu::IsLegalPlacement(*g.mig_table, x.profile, x.placement)) {
        Fail("illegal MIG placement accepted");
      }
      for (std::size_t b = a + 1; b < g.mig_instances.size(); ++b) {
        if (x.placement.Overlaps(g.mig_instances[b].placement)) {
          Fail("overlapping MIG instances accepted");
        }
      }
    }
    for (const hf::gpu::GpuLostFault& f : g.faults.lost) {
      if (f.at_ms < 0 || (f.recover_at_ms && *f.recover_at_ms < 0)) {
        Fail("negative fault time");
      }
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data,
                                      std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto inventory = hf::gpu::ParseInventory(text, "fuzz.json");
  if (inventory.ok()) {
    CheckInventory(*inventory);
  } else if (inventory.status().code() != hf::StatusCode::kInvalidArgument) {
    Fail("a bad inventory is not InvalidArgument");
  }

  auto state = hf::gpu::ParseSimMigState(text);
  if (state.ok()) {
    const std::string written = hf::gpu::SerializeSimMigState(*state);
    auto reread = hf::gpu::ParseSimMigState(written);
    if (!reread.ok()) Fail("a written state file does not parse");
    if (hf::gpu::SerializeSimMigState(*reread) != written) {
      Fail("the state file changed on a write and a re-read");
    }
  } else if (state.status().code() != hf::StatusCode::kInvalidArgument) {
    Fail("a bad state file is not InvalidArgument");
  }
  return 0;
}
