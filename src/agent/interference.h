// InterferenceMeter: how much the other slices on a GPU slow a slice's
// kernels down (docs/HOOK.md, "Interference").
//
// The hook times a sample of each slice's launches and adds the times to
// the slice's region per kernel class (hook/sampler.h). Every agent round,
// for each slice, the meter takes the growth of those counters and whether
// anything else used the slice's GPU in the round:
//  - alone: the classes' times feed the slice's **baseline** (its own time
//    alone, per class);
//  - shared: the time of the classes that have a baseline is compared with
//    what the baseline expects for the same launches.
// The slice's interference is (time shared) / (baseline time for the same
// launches) over the recent shared rounds, each round's weight decaying by
// kDecay per round that had samples; it is known once kMinSamples timed
// launches with a baseline were seen shared. Rounds alone with samples
// decay it too, so a slice left alone for a while reads unknown again
// rather than keeping a stale figure.
//
// A class's baseline is the mean over its alone rounds (the oldest decaying
// by kBaselineDecay per alone round, so a slow drift in the work is
// followed). No baseline, no figure: a slice that never ran alone is
// reported as not measured.
//
// Thread-safety: none; the agent's loop owns it.
#ifndef HF_AGENT_INTERFERENCE_H_
#define HF_AGENT_INTERFERENCE_H_

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <vector>

namespace hf::agent {

// One kernel class of a slice, as its region counts it (ever).
struct KernelCounts {
  std::uint64_t key = 0;
  std::uint64_t samples = 0;
  std::uint64_t total_ns = 0;
};

class InterferenceMeter {
 public:
  static constexpr double kDecay = 0.7;
  static constexpr double kBaselineDecay = 0.95;
  static constexpr double kMinSamples = 10;
  // Alone samples a class needs before it has a baseline.
  static constexpr double kMinBaselineSamples = 3;

  struct Reading {
    std::optional<double> ratio;  // none: not measured
    std::int64_t samples = 0;     // shared launches behind it (decayed)
  };

  // One round of slice `slice`: its classes now, and whether anything else
  // used its GPU during the round.
  void Observe(std::int64_t slice, const std::vector<KernelCounts>& now,
               bool shared);
  Reading Read(std::int64_t slice) const;
  // Forgets every slice not in `live`.
  void Retain(const std::set<std::int64_t>& live);

 private:
  struct Class {
    std::uint64_t samples = 0;  // the counters at the last round
    std::uint64_t total_ns = 0;
    double alone_samples = 0;  // the baseline (decayed sums)
    double alone_ns = 0;
  };
  struct Slice {
    bool seen = false;
    std::map<std::uint64_t, Class> classes;
    double shared_ns = 0;    // decayed sums over the shared rounds
    double expected_ns = 0;  // what the baseline expects for them
    double shared_samples = 0;
  };
  std::map<std::int64_t, Slice> slices_;
};

}  // namespace hf::agent

#endif  // HF_AGENT_INTERFERENCE_H_
