// libFuzzer target: the hook's configuration (src/hook/config.h) read from
// fuzzed environment values. The input is the values of the hook's
// variables, one per line in the order of kVariables; a line that is
// exactly "-" leaves its variable unset (so are the variables past the
// last line).
//
// Checked: ReadConfig's strings are always terminated and never cut short
// silently, a memory value is either taken exactly or fails closed (quota
// 0, bad_variable set), and ParseUnsigned agrees with std::from_chars.
#include <charconv>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <string_view>

#include "hook/config.h"

namespace {

using hf::hook::HookConfig;

constexpr const char* kVariables[] = {
    hf::hook::kEnvMemoryMb, hf::hook::kEnvComputePercent,
    hf::hook::kEnvSliceId,  hf::hook::kEnvGpuUuid,
    hf::hook::kEnvRegion,   hf::hook::kEnvContextMb,
    hf::hook::kEnvLog,      hf::hook::kEnvDisable,
};

void Fail(const char* what) {
  std::fprintf(stderr, "hook_config_fuzz: %s\n", what);
  std::abort();
}

const char* Lookup(const char* name, void* ctx) {
  const auto& env =
      *static_cast<const std::map<std::string, std::string>*>(ctx);
  auto it = env.find(name);
  return it == env.end() ? nullptr : it->second.c_str();
}

// The reference: a decimal number with no sign, spaces or suffix that
// fits 64 bits.
bool ReferenceUnsigned(const std::string& text, std::uint64_t* out) {
  if (text.empty()) return false;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, *out);
  return ec == std::errc() && ptr == end && text[0] != '+' && text[0] != '-';
}

bool Terminated(const char* s, std::size_t size) {
  return std::memchr(s, '\0', size) != nullptr;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data,
                                      std::size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  std::map<std::string, std::string> env;
  std::size_t start = 0;
  for (const char* name : kVariables) {
    if (start > input.size()) break;
    std::size_t end = input.find('\n', start);
    if (end == std::string_view::npos) end = input.size();
    const std::string_view value = input.substr(start, end - start);
    // getenv values end at the first NUL, as the environment does.
    const std::string text(value.substr(0, value.find('\0')));
    if (value != "-") env[name] = text;
    start = end + 1;
  }

  const HookConfig c = hf::hook::ReadConfig(&Lookup, &env);
  if (!Terminated(c.region_path, sizeof c.region_path) ||
      !Terminated(c.gpu_uuid, sizeof c.gpu_uuid)) {
    Fail("an unterminated string in the config");
  }
  if ((c.bad_variable == nullptr) != (c.bad_reason == nullptr)) {
    Fail("bad_variable and bad_reason disagree");
  }
  const auto set = [&](const char* name) { return env.contains(name); };
  if (set(hf::hook::kEnvDisable) && env[hf::hook::kEnvDisable] == "1") {
    if (c.active) Fail("HETEROFLOW_HOOK_DISABLE=1 left the hook active");
    return 0;
  }
  const bool active = set(hf::hook::kEnvMemoryMb) ||
                      set(hf::hook::kEnvComputePercent) ||
                      set(hf::hook::kEnvRegion);
  if (c.active != active) Fail("active does not follow the variables");
  if (!active) return 0;

  if (set(hf::hook::kEnvMemoryMb)) {
    std::uint64_t mb = 0;
    const bool valid = ReferenceUnsigned(env[hf::hook::kEnvMemoryMb], &mb) &&
                       mb >= 1 && mb <= (std::uint64_t{1} << 30);
    if (valid && c.quota_bytes != mb << 20) Fail("quota is not the value");
    if (!valid && c.quota_bytes != 0) Fail("a bad quota did not fail closed");
    if (!valid && c.bad_variable == nullptr) Fail("a bad quota is not named");
  } else if (c.quota_bytes != hf::hook::kUnlimited) {
    Fail("a quota without HETEROFLOW_SLICE_MEMORY_MB");
  }
  if (c.compute_percent > 99) Fail("compute_percent above 99");
  if (c.context_bytes > (std::uint64_t{64} << 30)) Fail("context over 64 GiB");

  // A value is taken whole or flagged, never cut short silently.
  if (set(hf::hook::kEnvGpuUuid)) {
    const std::string& uuid = env[hf::hook::kEnvGpuUuid];
    if (uuid.size() < sizeof c.gpu_uuid
            ? uuid != c.gpu_uuid
            : c.gpu_uuid[0] != '\0' || c.bad_variable == nullptr) {
      Fail("HETEROFLOW_GPU_UUID was not taken whole, nor flagged");
    }
  }

  for (const char* name : kVariables) {
    if (!set(name)) continue;
    std::uint64_t mine = 0;
    std::uint64_t reference = 0;
    const bool a = hf::hook::ParseUnsigned(env[name].c_str(), &mine);
    const bool b = ReferenceUnsigned(env[name], &reference);
    if (a != b || (a && mine != reference)) {
      Fail("ParseUnsigned disagrees with std::from_chars");
    }
  }
  return 0;
}
