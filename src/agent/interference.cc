#include "agent/interference.h"

#include <cmath>

namespace hf::agent {

void InterferenceMeter::Observe(std::int64_t slice,
                                const std::vector<KernelCounts>& now,
                                bool shared) {
  Slice& s = slices_[slice];
  const bool first = !s.seen;
  s.seen = true;
  double round_ns = 0;
  double round_expected = 0;
  double round_samples = 0;
  bool any = false;
  for (const KernelCounts& k : now) {
    Class& c = s.classes[k.key];
    // Counters only grow; smaller ones mean a new region: start afresh.
    const bool fresh = k.samples < c.samples || k.total_ns < c.total_ns;
    const std::uint64_t samples = fresh ? 0 : k.samples - c.samples;
    const std::uint64_t ns = fresh ? 0 : k.total_ns - c.total_ns;
    c.samples = k.samples;
    c.total_ns = k.total_ns;
    if (first || samples == 0) continue;
    any = true;
    const auto n = static_cast<double>(samples);
    if (!shared) {
      c.alone_samples = c.alone_samples * kBaselineDecay + n;
      c.alone_ns = c.alone_ns * kBaselineDecay + static_cast<double>(ns);
      continue;
    }
    if (c.alone_samples < kMinBaselineSamples || c.alone_ns <= 0) continue;
    round_ns += static_cast<double>(ns);
    round_expected += n * (c.alone_ns / c.alone_samples);
    round_samples += n;
  }
  if (!any) return;  // nothing launched: nothing learned, nothing aged
  s.shared_ns *= kDecay;
  s.expected_ns *= kDecay;
  s.shared_samples *= kDecay;
  s.shared_ns += round_ns;
  s.expected_ns += round_expected;
  s.shared_samples += round_samples;
}

InterferenceMeter::Reading InterferenceMeter::Read(std::int64_t slice) const {
  Reading r;
  auto it = slices_.find(slice);
  if (it == slices_.end()) return r;
  const Slice& s = it->second;
  if (s.shared_samples < kMinSamples || s.expected_ns <= 0) return r;
  r.ratio = s.shared_ns / s.expected_ns;
  r.samples = std::llround(s.shared_samples);
  return r;
}

void InterferenceMeter::Retain(const std::set<std::int64_t>& live) {
  std::erase_if(slices_,
                [&](const auto& entry) { return !live.contains(entry.first); });
}

}  // namespace hf::agent
