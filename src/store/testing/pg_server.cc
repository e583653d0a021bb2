// PgServer: finding PostgreSQL's tools, running them (as an unprivileged
// user when the test runs as root), and the cluster's life: initdb, start,
// stop, removal. See pg_server.h.
//
// Thread-safety: as pg_server.h says. RunTool forks; between fork and exec
// the child calls only async-signal-safe functions, so it is safe in a test
// that runs other threads.
#include "store/testing/pg_server.h"

#include <fcntl.h>
#include <grp.h>
#include <netinet/in.h>
#include <pwd.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <pqxx/pqxx>
#include <sstream>
#include <system_error>
#include <thread>
#include <utility>

namespace hf::store::pg_testing {
namespace {

// Where Debian's postgresql-15 package puts the server's tools.
constexpr const char* kFallbackBinDir = "/usr/lib/postgresql/15/bin";
// The unprivileged user the server runs as when the test runs as root.
constexpr const char* kServerUser = "postgres";
constexpr int kStartAttempts = 3;  // a free port may be taken meanwhile

bool IsExecutable(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
         ::access(path.c_str(), X_OK) == 0;
}

bool HasTools(const std::string& dir) {
  return IsExecutable(dir + "/initdb") && IsExecutable(dir + "/pg_ctl");
}

// The last `max_bytes` of a log file, for error messages.
std::string Tail(const std::string& path, std::size_t max_bytes = 3000) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return "(no log at " + path + ")";
  std::stringstream content;
  content << in.rdbuf();
  std::string text = content.str();
  if (text.size() > max_bytes) {
    text = "..." + text.substr(text.size() - max_bytes);
  }
  return text;
}

// A loopback TCP port nobody listens on right now.
StatusOr<int> FreeLoopbackPort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0)
    return Status::Unavailable(std::string("socket: ") + strerror(errno));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof addr;
  const bool ok =
      ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0;
  const int error = errno;
  ::close(fd);
  if (!ok) return Status::Unavailable(std::string("bind: ") + strerror(error));
  return static_cast<int>(ntohs(addr.sin_port));
}

// A string for postgresql.conf: single-quoted, quotes doubled.
std::string ConfString(const std::string& value) {
  std::string out = "'";
  for (const char c : value) {
    if (c == '\'') out += '\'';
    out += c;
  }
  return out + "'";
}

bool IsPlainName(std::string_view name) {
  return !name.empty() && std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
  });
}

}  // namespace

StatusOr<std::string> FindPostgresBinDir() {
  const char* path = std::getenv("PATH");
  std::string_view rest = path != nullptr ? path : "";
  while (!rest.empty()) {
    const std::size_t colon = rest.find(':');
    const std::string dir(rest.substr(0, colon));
    rest.remove_prefix(colon == std::string_view::npos ? rest.size()
                                                       : colon + 1);
    if (!dir.empty() && HasTools(dir)) return dir;
  }
  if (HasTools(kFallbackBinDir)) return std::string(kFallbackBinDir);
  return Status::NotFound(
      std::string("PostgreSQL's server tools (initdb, pg_ctl) are neither on "
                  "PATH nor in ") +
      kFallbackBinDir +
      ": install PostgreSQL 15 (Debian: apt-get install postgresql-15; "
      "scripts/bootstrap.sh does)");
}

StatusOr<std::unique_ptr<PgServer>> PgServer::Start() {
  StatusOr<std::string> bin_dir = FindPostgresBinDir();
  if (!bin_dir.ok()) return bin_dir.status();

  // initdb and postgres refuse to run as root.
  const bool drop_privileges = ::geteuid() == 0;
  uid_t uid = ::geteuid();
  gid_t gid = ::getegid();
  if (drop_privileges) {
    const passwd* user = ::getpwnam(kServerUser);
    if (user == nullptr) {
      return Status::FailedPrecondition(
          std::string("the test runs as root, which PostgreSQL refuses, and "
                      "there is no \"") +
          kServerUser +
          "\" user to run it as (the postgresql-15 package creates it)");
    }
    uid = user->pw_uid;
    gid = user->pw_gid;
  }

  const char* tmp = std::getenv("TMPDIR");
  std::string pattern =
      std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") +
      "/hf-pg-XXXXXX";
  if (::mkdtemp(pattern.data()) == nullptr) {
    return Status::Unavailable("mkdtemp " + pattern + ": " + strerror(errno));
  }
  // From here on the destructor removes the directory.
  std::unique_ptr<PgServer> server(
      new PgServer(pattern, *bin_dir, uid, gid, drop_privileges));
  if (drop_privileges && ::chown(pattern.c_str(), uid, gid) != 0) {
    return Status::Unavailable("chown " + pattern + ": " + strerror(errno));
  }

  const std::string data = server->dir_ + "/data";
  HF_RETURN_IF_ERROR(
      server->RunTool("initdb",
                      {"-D", data, "-U", "postgres", "--auth=trust",
                       "--no-sync", "--encoding=UTF8", "--locale=C"},
                      server->dir_ + "/initdb.log", 120));
  {
    std::ofstream conf(data + "/postgresql.conf", std::ios::app);
    conf << "\n# hf PgServer: a throwaway server for tests\n"
         << "listen_addresses = '127.0.0.1'\n"
         << "unix_socket_directories = " << ConfString(server->dir_)
         << "\n"
         // No fsync: a crash of the machine loses the data, which a test
         // does not care about. Commits still reach the kernel before they
         // are acknowledged, so Stop() loses nothing that was acknowledged.
         << "fsync = off\n"
         << "full_page_writes = off\n"
         << "shared_buffers = 32MB\n"
         << "max_connections = 200\n";
    if (!conf) {
      return Status::Unavailable("cannot append to " + data +
                                 "/postgresql.conf");
    }
  }
  Status started;
  for (int attempt = 0; attempt < kStartAttempts; ++attempt) {
    StatusOr<int> port = FreeLoopbackPort();
    if (!port.ok()) return port.status();
    server->port_ = *port;
    started = server->StartServer();
    if (started.ok()) return server;
  }
  return started;
}

PgServer::PgServer(std::string dir, std::string bin_dir, uid_t uid, gid_t gid,
                   bool drop_privileges)
    : dir_(std::move(dir)),
      bin_dir_(std::move(bin_dir)),
      uid_(uid),
      gid_(gid),
      drop_privileges_(drop_privileges) {}

PgServer::~PgServer() {
  if (running_) (void)Stop();
  std::error_code ignored;
  std::filesystem::remove_all(dir_, ignored);
}

std::string PgServer::Url(std::string_view database) const {
  return "postgres://postgres@127.0.0.1:" + std::to_string(port_) + "/" +
         std::string(database);
}

Status PgServer::StartServer() {
  const Status status =
      RunTool("pg_ctl",
              {"-D", dir_ + "/data", "-l", dir_ + "/server.log", "-w", "-t",
               "60", "-o", "-p " + std::to_string(port_), "start"},
              dir_ + "/pg_ctl.log", 90);
  if (!status.ok()) {
    // It may have come half way up: make sure it is down before a retry.
    (void)RunTool("pg_ctl",
                  {"-D", dir_ + "/data", "-m", "immediate", "-w", "stop"},
                  dir_ + "/pg_ctl-stop.log", 60);
    return status.WithContext("server log: " + Tail(dir_ + "/server.log"));
  }
  running_ = true;
  return Status::Ok();
}

Status PgServer::Stop() {
  Status status = RunTool(
      "pg_ctl",
      {"-D", dir_ + "/data", "-m", "immediate", "-w", "-t", "60", "stop"},
      dir_ + "/pg_ctl.log", 90);
  if (status.ok()) running_ = false;
  return status;
}

Status PgServer::Restart() {
  if (running_) return Status::FailedPrecondition("the server is running");
  return StartServer();
}

Status PgServer::CreateDatabase(std::string_view name, std::string_view from) {
  if (!IsPlainName(name) || !IsPlainName(from)) {
    return Status::InvalidArgument("database names here are [a-z0-9_]+");
  }
  // FILE_COPY (PostgreSQL 15+) copies the template's files: several times
  // faster than writing them all to the WAL when fsync is off.
  return Execute("CREATE DATABASE " + std::string(name) + " TEMPLATE " +
                 std::string(from) + " STRATEGY FILE_COPY");
}

Status PgServer::DropDatabase(std::string_view name) {
  if (!IsPlainName(name)) {
    return Status::InvalidArgument("database names here are [a-z0-9_]+");
  }
  return Execute("DROP DATABASE IF EXISTS " + std::string(name) +
                 " WITH (FORCE)");
}

Status PgServer::Execute(const std::string& sql) const {
  try {
    pqxx::connection conn("host=127.0.0.1 port=" + std::to_string(port_) +
                          " user=postgres dbname=postgres connect_timeout=10");
    pqxx::quiet_errorhandler quiet(conn);
    pqxx::nontransaction query(conn);
    query.exec0(sql);
    query.commit();
    return Status::Ok();
  } catch (const std::exception& e) {
    return Status::Unavailable(sql + ": " + e.what());
  }
}

Status PgServer::RunTool(const std::string& tool,
                         const std::vector<std::string>& args,
                         const std::string& log, int timeout_s) const {
  // Everything the child needs is prepared before fork: after it, in a
  // process with other threads, only async-signal-safe calls are allowed.
  const std::string path = bin_dir_ + "/" + tool;
  std::vector<std::string> storage = {path};
  storage.insert(storage.end(), args.begin(), args.end());
  std::vector<char*> argv;
  argv.reserve(storage.size() + 1);
  for (std::string& arg : storage) argv.push_back(arg.data());
  argv.push_back(nullptr);
  const int out =
      ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (out < 0)
    return Status::Unavailable("open " + log + ": " + strerror(errno));
  const int in = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (in < 0) {
    ::close(out);
    return Status::Unavailable(std::string("open /dev/null: ") +
                               strerror(errno));
  }

  const pid_t pid = ::fork();
  if (pid == 0) {
    if (::dup2(in, 0) < 0 || ::dup2(out, 1) < 0 || ::dup2(out, 2) < 0) {
      ::_exit(126);
    }
    // Nothing else of the test (its sockets, its files) leaks into the
    // server, which outlives this child.
    ::close_range(3, ~0U, 0);
    if (::chdir(dir_.c_str()) != 0) ::_exit(126);
    if (drop_privileges_ && (::setgroups(0, nullptr) != 0 ||
                             ::setgid(gid_) != 0 || ::setuid(uid_) != 0)) {
      ::_exit(126);
    }
    ::execv(path.c_str(), argv.data());
    ::_exit(127);
  }
  const int fork_error = errno;
  ::close(out);
  ::close(in);
  if (pid < 0) {
    return Status::Unavailable("fork for " + tool + ": " +
                               strerror(fork_error));
  }

  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
  int wait_status = 0;
  for (;;) {
    const pid_t done = ::waitpid(pid, &wait_status, WNOHANG);
    if (done == pid) break;
    if (done < 0 && errno != EINTR) {
      return Status::Unavailable("waitpid for " + tool + ": " +
                                 strerror(errno));
    }
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &wait_status, 0);
      return Status::Unavailable(tool + " did not finish within " +
                                 std::to_string(timeout_s) +
                                 " s; its output: " + Tail(log));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (WIFEXITED(wait_status) && WEXITSTATUS(wait_status) == 0) {
    return Status::Ok();
  }
  const std::string how =
      WIFEXITED(wait_status)
          ? "exit status " + std::to_string(WEXITSTATUS(wait_status))
          : "signal " + std::to_string(WTERMSIG(wait_status));
  std::string hint;
  if (WIFEXITED(wait_status) && WEXITSTATUS(wait_status) == 126) {
    hint = " (could not switch to the server's user or directory)";
  } else if (WIFEXITED(wait_status) && WEXITSTATUS(wait_status) == 127) {
    hint = " (could not execute " + path + ")";
  }
  return Status::Unavailable(tool + " failed with " + how + hint +
                             "; its output: " + Tail(log));
}

}  // namespace hf::store::pg_testing
