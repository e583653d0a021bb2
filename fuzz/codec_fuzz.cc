// libFuzzer target: every request-body decoder of src/api/codec.h, called
// directly (no store, so it runs at parser speed). The input is one request
// body, given to ParseBody and then to each decoder; the raw bytes also go
// to the string decoders (base64, UTF-8 repair, RFC 3339 times).
//
// Checked: nothing throws or crashes; an error is InvalidArgument naming a
// field; what an agent report decodes to holds the bounds of docs/API.md
// (GPU index 0..1023, memory 1 MiB..16 TiB, cpu_milli and host memory
// 0..2^30, task ids > 0, identifiers without control characters); base64
// and times survive a round trip; repaired UTF-8 is valid.
#include <openssl/evp.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "api/codec.h"

namespace {

using hf::Status;
using hf::StatusCode;
using hf::api::json;

void Fail(const char* what, const std::string& detail = "") {
  std::fprintf(stderr, "codec_fuzz: %s %s\n", what, detail.c_str());
  std::abort();
}

// A decoder's error: InvalidArgument with a field, or a role/lookup the
// decoder has no business returning.
void CheckError(const Status& s, const char* decoder) {
  if (s.ok()) return;
  if (s.code() != StatusCode::kInvalidArgument) Fail(decoder, s.ToString());
  if (s.field().empty()) Fail("an error naming no field:", s.ToString());
}

void CheckIdentifier(const std::string& s, const char* what) {
  if (hf::HasControlCharacter(s)) Fail("a control character in", what);
}

void CheckNodeReport(const hf::server::NodeReport& r) {
  CheckIdentifier(r.name, "node_id");
  CheckIdentifier(r.agent_version, "agent_version");
  if (r.cpu_milli < 0 || r.cpu_milli > (std::int64_t{1} << 30)) {
    Fail("cpu_milli out of bounds");
  }
  if (r.host_memory_mib < 0 || r.host_memory_mib > (std::int64_t{1} << 30)) {
    Fail("host_memory_mb out of bounds");
  }
  if (r.gpus.size() > 64) Fail("more than 64 GPUs");
  for (const hf::server::GpuReport& g : r.gpus) {
    if (g.index < 0 || g.index > 1023) Fail("GPU index out of bounds");
    if (g.memory_mib < 1 || g.memory_mib > (std::int64_t{16} << 20)) {
      Fail("GPU memory out of bounds");
    }
    if (g.cc_major < 0 || g.cc_major > 99 || g.cc_minor < 0 ||
        g.cc_minor > 99) {
      Fail("compute capability out of bounds");
    }
    CheckIdentifier(g.uuid, "uuid");
    CheckIdentifier(g.model, "model");
    if (g.mig_devices) {
      for (const std::string& d : *g.mig_devices) {
        if (d.empty() || d.size() > 256) Fail("MIG device id length");
        CheckIdentifier(d, "mig_devices");
      }
    }
  }
}

void CheckRunningTasks(const std::vector<hf::server::RunningTask>& tasks) {
  for (const hf::server::RunningTask& t : tasks) {
    if (t.task_id <= 0) Fail("task_id <= 0");
    if (t.gpu_indices.size() > 64) Fail("more than 64 GPU indices");
    for (int i : t.gpu_indices) {
      if (i < 0 || i > 1023) Fail("GPU index out of bounds");
    }
    if (t.hook) {
      const hf::server::HookReport& h = *t.hook;
      if (h.attaches < 0 || h.processes < 0 || h.used_bytes < 0 ||
          h.peak_bytes < 0 || h.quota_ooms < 0 || h.physical_ooms < 0 ||
          (h.quota_bytes && *h.quota_bytes < 0)) {
        Fail("a negative hook counter");
      }
    }
  }
}

void DecodeBody(std::string_view text) {
  auto body = hf::api::ParseBody(text);
  if (!body.ok()) {
    CheckError(body.status(), "ParseBody");
    return;
  }
  // Whatever parses must dump (strings are valid UTF-8) and parse again to
  // the same document.
  const std::string dumped = body->dump();
  auto again = hf::api::ParseBody(dumped);
  if (!again.ok() || *again != *body) Fail("ParseBody round trip", dumped);

  auto task = hf::api::ParseTaskCreate(*body);
  CheckError(task.status(), "ParseTaskCreate");
  if (task.ok()) {
    CheckIdentifier(task->name, "name");
    CheckIdentifier(task->image, "image");
    if (!hf::server::ValidateTaskCreate(*task).ok()) {
      Fail("a decoded task fails ValidateTaskCreate");
    }
  }
  CheckError(hf::api::ParseSliceCreate(*body).status(), "ParseSliceCreate");
  CheckError(hf::api::ParseSliceResize(*body).status(), "ParseSliceResize");
  CheckError(hf::api::ParseApprovalCreate(*body).status(),
             "ParseApprovalCreate");
  for (bool name_required : {true, false}) {
    auto report = hf::api::ParseNodeReport(*body, name_required);
    CheckError(report.status(), "ParseNodeReport");
    if (report.ok()) CheckNodeReport(*report);
  }
  auto running = hf::api::ParseRunningTasks(*body);
  CheckError(running.status(), "ParseRunningTasks");
  if (running.ok()) CheckRunningTasks(*running);
  auto states = hf::api::ParseTaskStates(*body);
  CheckError(states.status(), "ParseTaskStates");
  if (states.ok()) {
    for (const hf::server::TaskStateReport& s : *states) {
      if (s.task_id <= 0) Fail("task_id <= 0");
    }
  }
  auto mig = hf::api::ParseMigResult(*body);
  CheckError(mig.status(), "ParseMigResult");
  if (mig.ok()) CheckIdentifier(mig->device_id, "device_id");
}

void DecodeStrings(std::string_view text) {
  const std::string repaired = hf::api::ValidUtf8(text);
  try {
    (void)json(repaired).dump();  // throws on invalid UTF-8
  } catch (const json::exception&) {
    Fail("ValidUtf8 left invalid UTF-8");
  }
  if (hf::api::ValidUtf8(repaired) != repaired) Fail("ValidUtf8 idempotence");

  auto bytes = hf::api::DecodeBase64(text, "data");
  CheckError(bytes.status(), "DecodeBase64");
  if (bytes.ok()) {
    std::string encoded(4 * ((bytes->size() + 2) / 3) + 1, '\0');
    const int n =
        EVP_EncodeBlock(reinterpret_cast<unsigned char*>(encoded.data()),
                        reinterpret_cast<const unsigned char*>(bytes->data()),
                        static_cast<int>(bytes->size()));
    encoded.resize(static_cast<std::size_t>(n));
    // The text may set the unused low bits of its last character (RFC 4648
    // lets decoders accept that), so compare lengths and the bytes again.
    auto again = hf::api::DecodeBase64(encoded, "data");
    if (encoded.size() != text.size() || !again.ok() || *again != *bytes) {
      Fail("base64 round trip", encoded);
    }
  }

  auto at = hf::api::ParseTime(text, "at");
  CheckError(at.status(), "ParseTime");
  if (at.ok() && *at >= 0) {
    const std::string formatted = hf::api::FormatTime(*at);
    auto back = hf::api::ParseTime(formatted, "at");
    if (!back.ok() || *back != *at) Fail("time round trip", formatted);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data,
                                      std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  DecodeBody(text);
  if (size <= 4096) DecodeStrings(text);
  return 0;
}
