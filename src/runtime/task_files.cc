// Record formats and /proc reads for ProcessRuntime's state directory.
#include "runtime/task_files.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>
#include <fstream>

namespace hf::runtime::task_files {
namespace {

template <typename Int>
bool ParseInt(std::string_view text, Int& out) {
  if (text.empty()) return false;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, out);
  return ec == std::errc() && ptr == end;
}

std::vector<std::string_view> SplitSpaces(std::string_view text) {
  std::vector<std::string_view> words;
  std::size_t pos = 0;
  while (pos < text.size()) {
    const std::size_t start = text.find_first_not_of(" \t\n", pos);
    if (start == std::string_view::npos) break;
    std::size_t stop = text.find_first_of(" \t\n", start);
    if (stop == std::string_view::npos) stop = text.size();
    words.push_back(text.substr(start, stop - start));
    pos = stop;
  }
  return words;
}

struct ProcStat {
  char state = '?';
  std::uint64_t start_time = 0;
};

// Parses /proc/<pid>/stat. The command name (field 2) is in parentheses and
// may itself contain spaces and parentheses, so fields are counted from the
// last ')'.
std::optional<ProcStat> ReadProcStat(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  if (!in) return std::nullopt;
  std::string line;
  std::getline(in, line);
  const std::size_t paren = line.rfind(')');
  if (paren == std::string::npos) return std::nullopt;
  const std::vector<std::string_view> fields =
      SplitSpaces(std::string_view(line).substr(paren + 1));
  // fields[0] is field 3 (state); field 22 (starttime) is fields[19].
  constexpr std::size_t kStartTimeIndex = 22 - 3;
  if (fields.size() <= kStartTimeIndex || fields[0].size() != 1) {
    return std::nullopt;
  }
  ProcStat stat;
  stat.state = fields[0][0];
  if (!ParseInt(fields[kStartTimeIndex], stat.start_time)) return std::nullopt;
  return stat;
}

}  // namespace

std::string FormatIdentity(const ProcessIdentity& identity) {
  return std::to_string(identity.pid) + " " +
         std::to_string(identity.start_time) + " " + identity.boot_id + "\n";
}

std::optional<ProcessIdentity> ParseIdentity(std::string_view text) {
  const std::vector<std::string_view> words = SplitSpaces(text);
  if (words.size() != 2 && words.size() != 3) return std::nullopt;
  ProcessIdentity identity;
  if (!ParseInt(words[0], identity.pid) || identity.pid <= 0 ||
      !ParseInt(words[1], identity.start_time)) {
    return std::nullopt;
  }
  if (words.size() == 3) identity.boot_id = std::string(words[2]);
  return identity;
}

std::string BootId() {
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  std::string id;
  if (in) std::getline(in, id);
  return id;
}

std::optional<ProcessIdentity> IdentityOf(pid_t pid) {
  const std::optional<ProcStat> stat = ReadProcStat(pid);
  if (!stat) return std::nullopt;
  return ProcessIdentity{pid, stat->start_time, BootId()};
}

bool IsAlive(const ProcessIdentity& identity) {
  if (identity.pid <= 0) return false;
  if (identity.boot_id != BootId()) return false;  // recorded before a reboot
  const std::optional<ProcStat> stat = ReadProcStat(identity.pid);
  return stat && stat->state != 'Z' && stat->state != 'X' &&
         stat->start_time == identity.start_time;
}

std::string FormatExitRecord(const ExitRecord& record) {
  switch (record.kind) {
    case ExitRecord::Kind::kExited:
      return "exited " + std::to_string(record.value) + "\n";
    case ExitRecord::Kind::kSignaled:
      return "signaled " + std::to_string(record.value) + "\n";
    case ExitRecord::Kind::kExecFailed:
      return "failed " + std::to_string(record.value) + "\n" + record.message;
  }
  return "";
}

std::optional<ExitRecord> ParseExitRecord(std::string_view text) {
  const std::size_t newline = text.find('\n');
  if (newline == std::string_view::npos) return std::nullopt;
  const std::vector<std::string_view> words =
      SplitSpaces(text.substr(0, newline));
  ExitRecord record;
  if (words.size() != 2 || !ParseInt(words[1], record.value)) {
    return std::nullopt;
  }
  if (words[0] == "exited") {
    record.kind = ExitRecord::Kind::kExited;
  } else if (words[0] == "signaled") {
    record.kind = ExitRecord::Kind::kSignaled;
  } else if (words[0] == "failed") {
    record.kind = ExitRecord::Kind::kExecFailed;
    record.message = std::string(text.substr(newline + 1));
  } else {
    return std::nullopt;
  }
  return record;
}

std::string JoinNul(const std::vector<std::string>& items) {
  std::string out;
  for (const std::string& item : items) {
    out += item;
    out += '\0';
  }
  return out;
}

std::vector<std::string> SplitNul(std::string_view text) {
  std::vector<std::string> items;
  std::size_t pos = 0;
  while (pos < text.size()) {
    std::size_t stop = text.find('\0', pos);
    if (stop == std::string_view::npos) stop = text.size();
    items.emplace_back(text.substr(pos, stop - pos));
    pos = stop + 1;
  }
  return items;
}

Status WriteFileAtomic(const std::filesystem::path& path, std::string_view data,
                       mode_t mode) {
  std::filesystem::path temp = path;
  temp += ".tmp." + std::to_string(getpid());
  const int fd =
      open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
  if (fd < 0) {
    return Status::Internal("cannot create " + temp.string() + ": " +
                            std::strerror(errno));
  }
  std::size_t written = 0;
  while (written < data.size()) {
    const ssize_t n = write(fd, data.data() + written, data.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int saved = errno;
      close(fd);
      unlink(temp.c_str());
      return Status::Internal("cannot write " + temp.string() + ": " +
                              std::strerror(saved));
    }
    written += static_cast<std::size_t>(n);
  }
  // No fsync: the records describe processes, which a power loss ends too.
  if (close(fd) != 0 || rename(temp.c_str(), path.c_str()) != 0) {
    const int saved = errno;
    unlink(temp.c_str());
    return Status::Internal("cannot write " + path.string() + ": " +
                            std::strerror(saved));
  }
  return Status::Ok();
}

StatusOr<std::string> ReadWholeFile(const std::filesystem::path& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return Status::NotFound(path.string() + " is missing");
    return Status::Internal("cannot open " + path.string() + ": " +
                            std::strerror(errno));
  }
  std::string out;
  char buffer[4096];
  for (;;) {
    const ssize_t n = read(fd, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int saved = errno;
      close(fd);
      return Status::Internal("cannot read " + path.string() + ": " +
                              std::strerror(saved));
    }
    if (n == 0) break;
    out.append(buffer, static_cast<std::size_t>(n));
  }
  close(fd);
  return out;
}

}  // namespace hf::runtime::task_files
