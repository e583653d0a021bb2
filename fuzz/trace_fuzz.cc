// libFuzzer target: the simulator's input files (src/sim): the node and
// pod CSV traces hf-sim replays, and the result JSON hf-sim-plot reads
// back and draws. An input starting with '{' is a result document, one
// whose first line names the "sn" column a node list, any other a pod list.
//
// Checked: parsing never throws or crashes; accepted rows hold what
// trace.h promises (bounded counts, gpu_milli rules, unique names); an
// accepted result document can be drawn.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <string>
#include <string_view>

#include "sim/report.h"
#include "sim/trace.h"

namespace {

void Fail(const char* what) {
  std::fprintf(stderr, "trace_fuzz: %s\n", what);
  std::abort();
}

void CheckNodes(const std::vector<hf::sim::TraceNode>& nodes) {
  std::set<std::string> names;
  for (const hf::sim::TraceNode& n : nodes) {
    if (n.name.empty() || !names.insert(n.name).second) Fail("node names");
    if (n.cpu_milli < 0 || n.memory_mib < 0) Fail("negative node resources");
    if (n.gpu_count < 0 || n.gpu_count > 1024) Fail("node GPU count");
    if (n.gpu_count > 0 && n.model.empty()) Fail("GPU node without a model");
  }
}

void CheckPods(const std::vector<hf::sim::TracePod>& pods) {
  std::set<std::string> names;
  for (const hf::sim::TracePod& p : pods) {
    if (p.name.empty() || !names.insert(p.name).second) Fail("pod names");
    if (p.cpu_milli < 0 || p.memory_mib < 0) Fail("negative pod resources");
    if (p.num_gpu < 0 || p.num_gpu > 1024) Fail("pod GPU count");
    if (p.gpu_milli < 0 || p.gpu_milli > hf::kMilliPerGpu) Fail("gpu_milli");
    if ((p.num_gpu == 0) != (p.gpu_milli == 0)) Fail("gpu_milli without GPUs");
    if (p.num_gpu > 1 && p.gpu_milli != hf::kMilliPerGpu) {
      Fail("a multi-GPU pod with a GPU share");
    }
    for (const std::string& model : p.gpu_spec) {
      if (model.empty()) Fail("an empty model in gpu_spec");
    }
    if (p.creation_time < 0) Fail("a negative creation_time");
    if (p.deletion_time >= 0 && p.deletion_time < p.creation_time) {
      Fail("a task deleted before it was created");
    }
    if (p.deletion_time < -1) Fail("a deletion_time below -1");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data,
                                      std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  // One reader per input: the CSV library allocates 48 MiB per reader,
  // which under ASan is most of an input's time. The header picks it.
  const std::string header = text.substr(0, text.find('\n'));
  hf::Status status;
  if (text.starts_with('{')) {
    auto result = hf::sim::FromJson(text, "result.json");
    if (result.ok() && hf::sim::ToSvg(*result).empty()) Fail("empty drawing");
    status = result.status();
  } else if (header.find("sn") != std::string::npos) {
    auto nodes = hf::sim::ParseNodeCsv(text, "nodes.csv");
    if (nodes.ok()) CheckNodes(*nodes);
    status = nodes.status();
  } else {
    auto pods = hf::sim::ParsePodCsv(text, "pods.csv");
    if (pods.ok()) CheckPods(*pods);
    status = pods.status();
  }
  if (!status.ok() && status.code() != hf::StatusCode::kInvalidArgument) {
    Fail("a bad input file is not InvalidArgument");
  }
  return 0;
}
