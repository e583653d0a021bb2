// Strongly typed integer identifiers.
//
// Every object the ledger tracks is named by a small integer wrapped in its
// own type, so a NodeId can never be passed where a GpuId is expected. The
// server maps names (tenant names, GPU UUIDs) to these ids at its boundary.
//
// Thread-safety: plain value types.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <ostream>

namespace hf {

template <typename Tag>
class StrongId {
 public:
  using ValueType = std::uint64_t;
  static constexpr ValueType kInvalidValue =
      std::numeric_limits<ValueType>::max();

  constexpr StrongId() = default;  // invalid
  constexpr explicit StrongId(ValueType value) : value_(value) {}

  constexpr ValueType value() const { return value_; }
  constexpr bool valid() const { return value_ != kInvalidValue; }

  // NOLINTNEXTLINE(modernize-use-nullptr): clang-tidy 14 false positive
  friend constexpr auto operator<=>(StrongId, StrongId) = default;
  friend std::ostream& operator<<(std::ostream& os, StrongId id) {
    return os << id.value_;
  }

 private:
  ValueType value_ = kInvalidValue;
};

using NodeId = StrongId<struct NodeIdTag>;
using GpuId = StrongId<struct GpuIdTag>;
using TenantId = StrongId<struct TenantIdTag>;
using GroupId = StrongId<struct GroupIdTag>;
using SliceId = StrongId<struct SliceIdTag>;

}  // namespace hf

template <typename Tag>
struct std::hash<hf::StrongId<Tag>> {
  std::size_t operator()(hf::StrongId<Tag> id) const noexcept {
    return std::hash<std::uint64_t>{}(id.value());
  }
};
