#include "sim/trace.h"

// fast-cpp-csv-parser (Debian libfccp-dev): no reader thread, we hand it the
// whole text.
#define CSV_IO_NO_THREAD
// Its error type copies a file name with strncpy into a fixed buffer it
// terminates itself; GCC 12 at -O3 warns of truncation there.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstringop-truncation"
#endif
#include <libfccp/csv.h>
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

#include <charconv>
#include <fstream>
#include <set>
#include <sstream>

namespace hf::sim {
namespace {

using Reader = io::CSVReader<9, io::trim_chars<' ', '\t', '\r'>,
                             io::double_quote_escape<',', '"'>>;
using NodeReader = io::CSVReader<5, io::trim_chars<' ', '\t', '\r'>,
                                 io::double_quote_escape<',', '"'>>;

// "file:line: column: message".
Status RowError(const std::string& source, unsigned line,
                const std::string& column, const std::string& message) {
  return Status::InvalidArgument(
      source + ":" + std::to_string(line) + ": " + column + ": " + message,
      column);
}

// The largest CPU (milli-CPUs) and memory (MiB) a trace row may give: about
// a million CPUs and 1 PiB, far beyond any real machine, and small enough
// that the ledger (whose placement index holds them in 32 bits) and the
// simulator's sums take them exactly.
constexpr std::int64_t kMaxResource = std::int64_t{1} << 30;
// The largest creation or deletion time (seconds): far beyond any trace.
constexpr std::int64_t kMaxTime = std::int64_t{1} << 50;

// Parses a non-negative integer column value, at most `max`.
Status ParseCount(const std::string& text, const std::string& source,
                  unsigned line, const std::string& column, std::int64_t& out,
                  std::int64_t max = kMaxResource) {
  if (text.empty()) return RowError(source, line, column, "is empty");
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, out);
  if (ec == std::errc::result_out_of_range) {
    return RowError(source, line, column, "'" + text + "' is out of range");
  }
  if (ec != std::errc() || ptr != end) {
    return RowError(source, line, column, "'" + text + "' is not an integer");
  }
  if (out < 0) {
    return RowError(source, line, column, "'" + text + "' is negative");
  }
  if (out > max) {
    return RowError(source, line, column,
                    "'" + text + "' is above " + std::to_string(max));
  }
  return Status::Ok();
}

std::vector<std::string> SplitSpec(const std::string& spec) {
  std::vector<std::string> models;
  if (spec.empty() || spec == "nan" || spec == "NaN") return models;
  std::string part;
  std::istringstream in(spec);
  while (std::getline(in, part, '|')) {
    if (!part.empty()) models.push_back(part);
  }
  return models;
}

// Runs `body` and turns the CSV library's exceptions (which name the file
// and line themselves) into InvalidArgument.
template <typename Body>
Status Guard(Body&& body) {
  try {
    return body();
  } catch (const io::error::base& e) {
    return Status::InvalidArgument(e.what());  // names file and line
  }
}

}  // namespace

StatusOr<std::vector<TraceNode>> ParseNodeCsv(std::string_view text,
                                              const std::string& source) {
  std::vector<TraceNode> nodes;
  Status status = Guard([&]() -> Status {
    NodeReader reader(source, text.data(), text.data() + text.size());
    reader.read_header(io::ignore_extra_column, "sn", "cpu_milli", "memory_mib",
                       "gpu", "model");
    std::string name, cpu, memory, gpu, model;
    std::set<std::string> seen;
    while (reader.read_row(name, cpu, memory, gpu, model)) {
      const unsigned line = reader.get_file_line();
      TraceNode node;
      node.name = name;
      if (name.empty()) return RowError(source, line, "sn", "is empty");
      if (!seen.insert(name).second) {
        return RowError(source, line, "sn", "duplicate node '" + name + "'");
      }
      std::int64_t gpus = 0;
      HF_RETURN_IF_ERROR(
          ParseCount(cpu, source, line, "cpu_milli", node.cpu_milli));
      HF_RETURN_IF_ERROR(
          ParseCount(memory, source, line, "memory_mib", node.memory_mib));
      HF_RETURN_IF_ERROR(ParseCount(gpu, source, line, "gpu", gpus));
      if (gpus > 1024) {
        return RowError(source, line, "gpu", "more than 1024 GPUs on a node");
      }
      node.gpu_count = static_cast<int>(gpus);
      node.model = model;
      if (node.gpu_count > 0 && (model.empty() || model == "nan")) {
        return RowError(source, line, "model", "is empty for a GPU node");
      }
      nodes.push_back(std::move(node));
    }
    return Status::Ok();
  });
  if (!status.ok()) return status;
  return nodes;
}

StatusOr<std::vector<TracePod>> ParsePodCsv(std::string_view text,
                                            const std::string& source) {
  std::vector<TracePod> pods;
  Status status = Guard([&]() -> Status {
    Reader reader(source, text.data(), text.data() + text.size());
    reader.read_header(io::ignore_extra_column | io::ignore_missing_column,
                       "name", "cpu_milli", "memory_mib", "num_gpu",
                       "gpu_milli", "gpu_spec", "qos", "creation_time",
                       "deletion_time");
    for (const char* required :
         {"name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli"}) {
      if (!reader.has_column(required)) {
        return Status::InvalidArgument(
            source + ":1: missing column " + required, required);
      }
    }
    std::string name, cpu, memory, num_gpu, gpu_milli, spec, qos, created,
        deleted;
    std::set<std::string> seen;
    while (reader.read_row(name, cpu, memory, num_gpu, gpu_milli, spec, qos,
                           created, deleted)) {
      const unsigned line = reader.get_file_line();
      TracePod pod;
      pod.name = name;
      if (name.empty()) return RowError(source, line, "name", "is empty");
      if (!seen.insert(name).second) {
        return RowError(source, line, "name", "duplicate task '" + name + "'");
      }
      std::int64_t n = 0, milli = 0;
      HF_RETURN_IF_ERROR(
          ParseCount(cpu, source, line, "cpu_milli", pod.cpu_milli));
      HF_RETURN_IF_ERROR(
          ParseCount(memory, source, line, "memory_mib", pod.memory_mib));
      HF_RETURN_IF_ERROR(ParseCount(num_gpu, source, line, "num_gpu", n));
      HF_RETURN_IF_ERROR(
          ParseCount(gpu_milli, source, line, "gpu_milli", milli));
      if (n > 1024) {
        return RowError(source, line, "num_gpu", "more than 1024 GPUs");
      }
      if (milli > kMilliPerGpu) {
        return RowError(source, line, "gpu_milli",
                        std::to_string(milli) + " is above 1000 (one GPU)");
      }
      if (n == 0 && milli != 0) {
        return RowError(source, line, "gpu_milli",
                        "must be 0 for a task without GPUs (num_gpu 0)");
      }
      if (n > 0 && milli == 0) {
        return RowError(source, line, "gpu_milli",
                        "is 0 for a task with num_gpu " + std::to_string(n));
      }
      if (n > 1 && milli != kMilliPerGpu) {
        return RowError(source, line, "gpu_milli",
                        "must be 1000 for a multi-GPU task (num_gpu " +
                            std::to_string(n) + ")");
      }
      pod.num_gpu = static_cast<int>(n);
      pod.gpu_milli = static_cast<int>(milli);
      pod.gpu_spec = SplitSpec(spec);
      pod.qos = qos == "nan" ? "" : qos;
      if (!created.empty()) {
        HF_RETURN_IF_ERROR(ParseCount(created, source, line, "creation_time",
                                      pod.creation_time, kMaxTime));
      }
      if (!deleted.empty()) {
        HF_RETURN_IF_ERROR(ParseCount(deleted, source, line, "deletion_time",
                                      pod.deletion_time, kMaxTime));
        if (pod.deletion_time < pod.creation_time) {
          return RowError(source, line, "deletion_time",
                          "is before creation_time");
        }
      } else if (!created.empty()) {
        pod.deletion_time = -1;  // never leaves
      }
      // Absent columns: keep them empty for the next row.
      spec.clear();
      qos.clear();
      created.clear();
      deleted.clear();
      pods.push_back(std::move(pod));
    }
    return Status::Ok();
  });
  if (!status.ok()) return status;
  return pods;
}

namespace {

StatusOr<std::string> Slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::NotFound("cannot read " + path);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

}  // namespace

StatusOr<std::vector<TraceNode>> ReadNodeCsv(const std::string& path) {
  auto text = Slurp(path);
  if (!text.ok()) return text.status();
  return ParseNodeCsv(*text, path);
}

StatusOr<std::vector<TracePod>> ReadPodCsv(const std::string& path) {
  auto text = Slurp(path);
  if (!text.ok()) return text.status();
  return ParsePodCsv(*text, path);
}

}  // namespace hf::sim
