// Implementation of the end-to-end harness (see server_harness.h).
#include "tests/e2e/server_harness.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <httplib.h>
#include <netinet/in.h>
#include <signal.h>
#include <strings.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <random>
#include <sstream>
#include <thread>

extern char** environ;

namespace hf::e2e {

namespace fs = std::filesystem;

// ------------------------------------------------------- child processes

std::string ReadFile(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string Tail(const std::string& text, std::size_t max_bytes) {
  if (text.size() <= max_bytes) return text;
  return "[...]" + text.substr(text.size() - max_bytes);
}

std::string DescribeWaitStatus(int status) {
  if (WIFEXITED(status)) {
    return "exit code " + std::to_string(WEXITSTATUS(status));
  }
  if (WIFSIGNALED(status)) {
    return std::string("killed by signal ") + strsignal(WTERMSIG(status));
  }
  return "wait status " + std::to_string(status);
}

bool KeepDirs() {
  const char* keep = std::getenv("HF_E2E_KEEP");
  return keep != nullptr && *keep != '\0' && std::string(keep) != "0";
}

bool ReapChild(pid_t& pid, int* status, milliseconds timeout) {
  if (pid <= 0) return false;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    const pid_t done = waitpid(pid, status, WNOHANG);
    if (done == pid) {
      pid = -1;
      return true;
    }
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(milliseconds(5));
  }
}

::testing::AssertionResult TerminateChild(
    pid_t& pid, const std::string& program, milliseconds timeout,
    const std::function<std::string()>& log) {
  if (pid <= 0) {
    return ::testing::AssertionFailure() << program << " is not running";
  }
  kill(pid, SIGTERM);
  int status = 0;
  if (!ReapChild(pid, &status, timeout)) {
    kill(pid, SIGKILL);
    ReapChild(pid, &status, milliseconds(5'000));
    return ::testing::AssertionFailure()
           << program << " did not exit within " << timeout.count()
           << " ms of SIGTERM (killed); its log:\n"
           << log();
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return ::testing::AssertionFailure()
           << program << " did not exit cleanly on SIGTERM ("
           << DescribeWaitStatus(status) << "); its log:\n"
           << log();
  }
  return ::testing::AssertionSuccess();
}

::testing::AssertionResult KillChild(pid_t& pid, const std::string& program) {
  if (pid <= 0) {
    return ::testing::AssertionFailure() << program << " is not running";
  }
  kill(pid, SIGKILL);
  int status = 0;
  if (!ReapChild(pid, &status, milliseconds(10'000))) {
    return ::testing::AssertionFailure() << program << " survived SIGKILL";
  }
  return ::testing::AssertionSuccess();
}

// ------------------------------------------------------------------- HTTP

std::string HttpReply::Describe() const {
  std::string out = request_line + " -> ";
  if (status == 0) return out + "no reply (" + error + ")";
  out += std::to_string(status) + " " + raw.substr(0, 2000);
  return out;
}

HttpClient::HttpClient(std::string host, int port)
    : host_(std::move(host)), port_(port) {}

HttpReply HttpClient::Send(
    const std::string& method, const std::string& path, const std::string& body,
    const std::string& token,
    const std::vector<std::pair<std::string, std::string>>& extra_headers)
    const {
  httplib::Client client(host_, port_);
  client.set_connection_timeout(std::chrono::seconds(5));
  client.set_read_timeout(std::chrono::seconds(60));
  client.set_write_timeout(std::chrono::seconds(60));
  httplib::Request req;
  req.method = method;
  req.path = path;
  if (!token.empty()) req.headers.emplace("Authorization", "Bearer " + token);
  bool has_type = false;
  for (const auto& [name, value] : extra_headers) {
    has_type = has_type || strcasecmp(name.c_str(), "Content-Type") == 0;
    req.headers.emplace(name, value);
  }
  if (!body.empty()) {
    if (!has_type) req.headers.emplace("Content-Type", "application/json");
    req.body = body;
  }
  HttpReply reply;
  reply.request_line = method + " " + path;
  httplib::Result result = client.send(req);
  if (!result) {
    reply.error = httplib::to_string(result.error());
    return reply;
  }
  reply.status = result->status;
  reply.raw = result->body;
  reply.content_type = result->get_header_value("Content-Type");
  reply.www_authenticate = result->get_header_value("WWW-Authenticate");
  reply.allow = result->get_header_value("Allow");
  reply.body = json::parse(reply.raw, nullptr, /*allow_exceptions=*/false);
  if (reply.body.is_discarded()) reply.body = nullptr;
  return reply;
}

HttpReply HttpClient::SendBare(const std::string& method,
                               const std::string& path,
                               const std::string& token) const {
  HttpReply reply;
  reply.request_line = method + " " + path + " (no Content-Length)";
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    reply.error = std::string("socket: ") + std::strerror(errno);
    return reply;
  }
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<std::uint16_t>(port_));
  timeval timeout{};
  timeout.tv_sec = 30;
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  if (inet_pton(AF_INET, host_.c_str(), &addr.sin_addr) != 1 ||
      connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) !=
          0) {
    reply.error = "connect to " + host_ + ":" + std::to_string(port_) +
                  " failed: " + std::strerror(errno);
    close(fd);
    return reply;
  }
  std::string request = method + " " + path + " HTTP/1.1\r\nHost: " + host_ +
                        "\r\nConnection: close\r\n";
  if (!token.empty()) request += "Authorization: Bearer " + token + "\r\n";
  request += "\r\n";
  for (std::size_t sent = 0; sent < request.size();) {
    const ssize_t n = write(fd, request.data() + sent, request.size() - sent);
    if (n <= 0) {
      reply.error = std::string("write: ") + std::strerror(errno);
      close(fd);
      return reply;
    }
    sent += static_cast<std::size_t>(n);
  }
  std::string response;
  char buffer[4096];
  for (ssize_t n; (n = read(fd, buffer, sizeof(buffer))) > 0;) {
    response.append(buffer, static_cast<std::size_t>(n));
  }
  close(fd);
  // "HTTP/1.1 405 Method Not Allowed\r\nName: value\r\n...\r\n\r\nbody"
  const std::size_t head_end = response.find("\r\n\r\n");
  if (response.rfind("HTTP/1.", 0) != 0 || head_end == std::string::npos) {
    reply.error = "not an HTTP reply: " + response.substr(0, 200);
    return reply;
  }
  reply.status = std::atoi(response.c_str() + response.find(' ') + 1);
  std::istringstream head(response.substr(0, head_end));
  for (std::string line; std::getline(head, line);) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    const std::size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    const std::string name = line.substr(0, colon);
    const std::string value = line.substr(
        std::min(line.size(), line.find_first_not_of(' ', colon + 1)));
    if (strcasecmp(name.c_str(), "Content-Type") == 0) {
      reply.content_type = value;
    } else if (strcasecmp(name.c_str(), "WWW-Authenticate") == 0) {
      reply.www_authenticate = value;
    } else if (strcasecmp(name.c_str(), "Allow") == 0) {
      reply.allow = value;
    }
  }
  // The server answers with Content-Length and closes: the rest is the body.
  reply.raw = response.substr(head_end + 4);
  reply.body = json::parse(reply.raw, nullptr, /*allow_exceptions=*/false);
  if (reply.body.is_discarded()) reply.body = nullptr;
  return reply;
}

HttpReply HttpClient::Get(const std::string& path,
                          const std::string& token) const {
  return Send("GET", path, "", token);
}

HttpReply HttpClient::Post(const std::string& path, const json& body,
                           const std::string& token) const {
  return Send("POST", path, body.dump(), token);
}

HttpReply HttpClient::PostRaw(const std::string& path, const std::string& body,
                              const std::string& token,
                              const std::string& content_type) const {
  return Send("POST", path, body, token, {{"Content-Type", content_type}});
}

HttpReply HttpClient::Patch(const std::string& path, const json& body,
                            const std::string& token) const {
  return Send("PATCH", path, body.dump(), token);
}

HttpReply HttpClient::Delete(const std::string& path,
                             const std::string& token) const {
  return Send("DELETE", path, "", token);
}

// ----------------------------------------------------------------- process

int PickFreePort() {
  const int sock = socket(AF_INET, SOCK_STREAM, 0);
  if (sock < 0) return 0;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  int port = 0;
  socklen_t length = sizeof(addr);
  if (bind(sock, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      getsockname(sock, reinterpret_cast<sockaddr*>(&addr), &length) == 0) {
    port = ntohs(addr.sin_port);
  }
  close(sock);
  return port;
}

bool WaitFor(const std::function<bool()>& done, milliseconds timeout,
             milliseconds interval) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    if (done()) return true;
    if (std::chrono::steady_clock::now() >= deadline) return done();
    std::this_thread::sleep_for(interval);
  }
}

std::string UniqueName(const std::string& prefix) {
  static std::atomic<int> counter{0};
  return prefix + "-" + std::to_string(++counter);
}

ServerProcess::ServerProcess(ServerOptions options)
    : options_(std::move(options)) {
  std::string pattern = (fs::temp_directory_path() / "hf_e2e_XXXXXX").string();
  if (mkdtemp(pattern.data()) == nullptr) {
    ADD_FAILURE() << "mkdtemp: " << std::strerror(errno);
    return;
  }
  dir_ = pattern;
  // A token only this run knows; the server hashes it into the database.
  std::random_device random;
  std::ostringstream token;
  token << "hf_e2e_admin_" << std::hex << random() << random() << random();
  admin_token_ = token.str();
  std::ofstream(dir_ / "admin.token") << admin_token_ << "\n";
}

ServerProcess::~ServerProcess() {
  if (pid_ > 0) {
    kill(pid_, SIGKILL);
    int status = 0;
    waitpid(pid_, &status, 0);
    pid_ = -1;
  }
  if (dir_.empty()) return;
  if (KeepDirs()) {
    std::cerr << "[e2e] kept " << dir_ << "\n";
    return;
  }
  std::error_code ignored;
  fs::remove_all(dir_, ignored);
}

std::string ServerProcess::url() const {
  return "http://127.0.0.1:" + std::to_string(port_);
}

std::string ServerProcess::Log(std::size_t max_bytes) const {
  return Tail(ReadFile(log_path()), max_bytes);
}

bool ServerProcess::Reap(int* status, milliseconds timeout) {
  return ReapChild(pid_, status, timeout);
}

::testing::AssertionResult ServerProcess::Start() {
  if (dir_.empty()) return ::testing::AssertionFailure() << "no temp dir";
  if (pid_ > 0) {
    return ::testing::AssertionFailure() << "the server is already running";
  }
  int port = port_;  // a restart tries the old port first
  for (int attempt = 0; attempt < std::max(1, options_.port_attempts);
       ++attempt) {
    if (port == 0) port = PickFreePort();
    if (port == 0) {
      return ::testing::AssertionFailure() << "cannot find a free port";
    }
    bool port_in_use = false;
    ::testing::AssertionResult started = StartOnPort(port, &port_in_use);
    if (started || !port_in_use) return started;
    port = 0;  // taken meanwhile: another one
  }
  return ::testing::AssertionFailure()
         << "no free port after " << options_.port_attempts << " attempts\n"
         << Log();
}

bool ServerProcess::WaitExit(milliseconds timeout, int* status) {
  return ReapChild(pid_, status, timeout);
}

::testing::AssertionResult ServerProcess::StartOnPort(int port,
                                                      bool* port_in_use) {
  *port_in_use = false;
  const std::size_t log_offset =
      fs::exists(log_path()) ? fs::file_size(log_path()) : 0;
  std::vector<std::string> args = {
      HF_SERVER_PATH,
      "--listen",
      "127.0.0.1:" + std::to_string(port),
      "--db",
      options_.db.empty() ? "sqlite:" + db_path().string() : options_.db,
      "--admin-token-file",
      (dir_ / "admin.token").string(),
  };
  args.insert(args.end(), options_.flags.begin(), options_.flags.end());
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  // The test's environment minus HF_* (the server reads its flags from
  // there too; a developer's shell must not change the test).
  std::vector<std::string> env_storage;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    if (std::strncmp(*e, "HF_", 3) != 0) env_storage.emplace_back(*e);
  }
  std::vector<char*> envp;
  for (std::string& e : env_storage) envp.push_back(e.data());
  envp.push_back(nullptr);

  const int log_fd =
      open(log_path().c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (log_fd < 0) {
    return ::testing::AssertionFailure()
           << "cannot open " << log_path() << ": " << std::strerror(errno);
  }
  {
    const std::string banner =
        "=== hf-server start on port " + std::to_string(port) + " ===\n";
    (void)!write(log_fd, banner.data(), banner.size());
  }
  const int null_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) {
    close(log_fd);
    if (null_fd >= 0) close(null_fd);
    return ::testing::AssertionFailure() << "fork: " << std::strerror(errno);
  }
  if (pid == 0) {
    // Child: only async-signal-safe calls until exec.
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(126);
    if (null_fd >= 0) dup2(null_fd, STDIN_FILENO);
    dup2(log_fd, STDOUT_FILENO);
    dup2(log_fd, STDERR_FILENO);
    execve(argv[0], argv.data(), envp.data());
    static const char kMsg[] = "e2e harness: execve failed\n";
    (void)!write(STDERR_FILENO, kMsg, sizeof kMsg - 1);
    _exit(127);
  }
  close(log_fd);
  if (null_fd >= 0) close(null_fd);
  pid_ = pid;
  port_ = port;

  const HttpClient http("127.0.0.1", port);
  const auto deadline =
      std::chrono::steady_clock::now() + options_.start_timeout;
  std::string last;
  for (;;) {
    int status = 0;
    if (Reap(&status, milliseconds(0))) {
      const std::string log = ReadFile(log_path()).substr(log_offset);
      *port_in_use = log.find("cannot listen") != std::string::npos ||
                     log.find("address in use") != std::string::npos;
      return ::testing::AssertionFailure()
             << "hf-server exited before answering /healthz ("
             << DescribeWaitStatus(status) << "); its log:\n"
             << Tail(log, 16'384);
    }
    HttpReply health = http.Get("/healthz");
    if (health.status == 200 && health.body.is_object() &&
        health.body.value("ok", false)) {
      return ::testing::AssertionSuccess();
    }
    last = health.Describe();
    if (std::chrono::steady_clock::now() >= deadline) {
      kill(pid_, SIGKILL);
      int ignored = 0;
      Reap(&ignored, milliseconds(5'000));
      return ::testing::AssertionFailure()
             << "hf-server did not answer /healthz within "
             << options_.start_timeout.count() << " ms (last: " << last
             << "); its log:\n"
             << Log();
    }
    std::this_thread::sleep_for(milliseconds(10));
  }
}

::testing::AssertionResult ServerProcess::Stop() {
  return TerminateChild(pid_, "hf-server", options_.stop_timeout,
                        [&] { return Log(); });
}

::testing::AssertionResult ServerProcess::Kill() {
  return KillChild(pid_, "hf-server");
}

::testing::AssertionResult ServerProcess::Restart(bool kill_it) {
  ::testing::AssertionResult down = kill_it ? Kill() : Stop();
  if (!down) return down;
  return Start();
}

// --------------------------------------------------------------------- Api

std::string Api::CreateTenant(const std::string& name,
                              const std::optional<std::string>& group) const {
  json body = {{"name", name}};
  if (group) body["shared_group"] = *group;
  HttpReply r = http_.Post("/api/v1/tenants", body, admin_);
  if (r.status != 201) {
    ADD_FAILURE() << "creating tenant " << name << ": " << r.Describe();
    return "";
  }
  return name;
}

std::string Api::NewTenant(const std::string& prefix,
                           const std::optional<std::string>& group) const {
  return CreateTenant(UniqueName(prefix), group);
}

std::string Api::CreateToken(const std::string& role,
                             const std::optional<std::string>& tenant,
                             const std::string& as, json* reply) const {
  json body = {{"role", role}, {"description", "e2e " + role}};
  if (tenant) body["tenant"] = *tenant;
  HttpReply r = http_.Post("/api/v1/tokens", body, as.empty() ? admin_ : as);
  if (reply != nullptr) *reply = r.body;
  if (r.status != 201 || !r.body.is_object() || !r.body.contains("token") ||
      !r.body["token"].is_string()) {
    ADD_FAILURE() << "creating a " << role << " token: " << r.Describe();
    return "";
  }
  return r.body["token"].get<std::string>();
}

json Api::CreateTask(const json& body, const std::string& token) const {
  HttpReply r = http_.Post("/api/v1/tasks", body, token);
  if (r.status != 201 || !r.body.is_object()) {
    ADD_FAILURE() << "creating task " << body.dump() << ": " << r.Describe();
    return nullptr;
  }
  return r.body;
}

json Api::GetTask(std::int64_t id, const std::string& token) const {
  HttpReply r = http_.Get("/api/v1/tasks/" + std::to_string(id), token);
  if (r.status != 200) {
    ADD_FAILURE() << "getting task " << id << ": " << r.Describe();
    return nullptr;
  }
  return r.body;
}

json Api::WaitTask(std::int64_t id, const std::string& token,
                   const std::function<bool(const json&)>& pred,
                   milliseconds timeout) const {
  json last;
  WaitFor(
      [&] {
        HttpReply r = http_.Get("/api/v1/tasks/" + std::to_string(id), token);
        if (r.status != 200) return false;
        last = r.body;
        return pred(last);
      },
      timeout);
  return last;
}

json Api::WaitNotPending(std::int64_t id, const std::string& token,
                         milliseconds timeout) const {
  return WaitTask(
      id, token,
      [](const json& t) { return t.value("status", "") != "pending"; },
      timeout);
}

json Api::WaitTried(std::int64_t id, const std::string& token,
                    milliseconds timeout) const {
  return WaitTask(
      id, token,
      [](const json& t) {
        return t.value("status", "") != "pending" ||
               (t["pending_reason"].is_string() &&
                t["pending_reason"] != "waiting for the scheduler");
      },
      timeout);
}

json Api::GetSlice(std::int64_t id, const std::string& token) const {
  HttpReply r = http_.Get("/api/v1/slices/" + std::to_string(id), token);
  if (r.status != 200) {
    ADD_FAILURE() << "getting slice " << id << ": " << r.Describe();
    return nullptr;
  }
  return r.body;
}

json Api::ListAll(const std::string& path, const std::string& token) const {
  json items = json::array();
  std::string cursor;
  for (int page = 0; page < 10'000; ++page) {
    std::string url = path;
    if (!cursor.empty()) {
      url += (url.find('?') == std::string::npos ? "?" : "&");
      url += "cursor=" + cursor;
    }
    HttpReply r = http_.Get(url, token);
    if (r.status != 200 || !r.body.is_object()) {
      ADD_FAILURE() << "listing " << url << ": " << r.Describe();
      return items;
    }
    for (const json& item : r.body["items"]) items.push_back(item);
    if (r.body["next_cursor"].is_null()) break;
    cursor = r.body["next_cursor"].get<std::string>();
  }
  return items;
}

// ----------------------------------------------------------------- SimNode

json SimGpu::ToJson(const std::string& node) const {
  return {{"index", index},
          {"uuid",
           uuid.empty() ? "GPU-" + node + "-" + std::to_string(index) : uuid},
          {"vendor", vendor},
          {"model", model},
          {"memory_mb", memory_mb},
          {"compute_capability", compute_capability},
          {"mig_capable", mig_capable},
          {"mps_capable", mps_capable},
          {"health", lost ? "lost" : "ok"}};
}

SimNode::SimNode(Api api, std::string name, std::vector<SimGpu> gpus,
                 std::string token)
    : api_(std::move(api)),
      name_(std::move(name)),
      gpus_(std::move(gpus)),
      token_(std::move(token)) {
  if (token_.empty()) token_ = api_.CreateToken("node", std::nullopt);
}

std::string SimNode::GpuUuid(int index) const {
  for (const SimGpu& g : gpus_) {
    if (g.index == index) return g.ToJson(name_)["uuid"].get<std::string>();
  }
  return "";
}

json SimNode::ReportBody() const {
  json gpus = json::array();
  for (const SimGpu& g : gpus_) gpus.push_back(g.ToJson(name_));
  return {{"node_id", name_},
          {"containerized", containerized},
          {"hook_available", hook_available},
          {"cpu_milli", 64000},
          {"host_memory_mb", 512000},
          {"agent_version", "e2e-sim"},
          {"gpus", std::move(gpus)}};
}

HttpReply SimNode::RegisterReply() const {
  return api_.http().Post("/api/v1/nodes/register", ReportBody(), token_);
}

::testing::AssertionResult SimNode::Register() const {
  HttpReply r = RegisterReply();
  if (r.status != 200) {
    return ::testing::AssertionFailure()
           << "registering " << name_ << ": " << r.Describe();
  }
  return ::testing::AssertionSuccess();
}

HttpReply SimNode::Heartbeat(const json& tasks) const {
  json body = ReportBody();
  body["tasks"] = tasks;
  return api_.http().Post("/api/v1/nodes/" + name_ + "/heartbeat", body,
                          token_);
}

HttpReply SimNode::Assignments() const {
  return api_.http().Get("/api/v1/nodes/" + name_ + "/assignments", token_);
}

HttpReply SimNode::ReportState(std::int64_t task_id, const std::string& state,
                               std::optional<int> exit_code,
                               const std::string& message) const {
  json entry = {{"task_id", task_id}, {"state", state}};
  if (exit_code) entry["exit_code"] = *exit_code;
  if (!message.empty()) entry["message"] = message;
  return api_.http().Post("/api/v1/nodes/" + name_ + "/task-states",
                          {{"states", json::array({entry})}}, token_);
}

HttpReply SimNode::Claim() const {
  return api_.http().Post("/api/v1/nodes/" + name_ + "/slice-requests/claim",
                          json::object(), token_);
}

HttpReply SimNode::Result(std::int64_t request_id, const json& body) const {
  return api_.http().Post(
      "/api/v1/slice-requests/" + std::to_string(request_id) + "/result", body,
      token_);
}

bool JsonMentions(const json& j, const std::string& needle) {
  return j.dump().find(needle) != std::string::npos;
}

::testing::AssertionResult IsApiError(const HttpReply& reply, int status,
                                      const std::string& code,
                                      const std::optional<std::string>& field) {
  auto fail = [&](const std::string& what) {
    return ::testing::AssertionFailure()
           << what << "; expected " << status << " " << code
           << (field ? " field '" + *field + "'" : std::string()) << ", got "
           << reply.Describe();
  };
  if (reply.status != status) return fail("wrong status");
  if (!reply.body.is_object()) return fail("the body is not a JSON object");
  if (reply.content_type.find("application/json") == std::string::npos) {
    return fail("Content-Type is '" + reply.content_type + "'");
  }
  if (reply.body.value("error", "") != code) return fail("wrong error code");
  if (!reply.body.contains("message") || !reply.body["message"].is_string() ||
      reply.body["message"].get<std::string>().empty()) {
    return fail("no message");
  }
  if (field) {
    if (field->empty()) {
      if (reply.body.contains("field")) return fail("unexpected field");
    } else if (!reply.body.contains("field") || reply.body["field"] != *field) {
      return fail("wrong field");
    }
  }
  return ::testing::AssertionSuccess();
}

::testing::AssertionResult IsInvalid(const HttpReply& reply,
                                     const std::string& field) {
  return IsApiError(reply, 400, "invalid_argument", field);
}

::testing::AssertionResult HasStatus(const HttpReply& reply, int status) {
  if (reply.status == status) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << "expected HTTP " << status << ", got " << reply.Describe();
}

void SharedServer::Start(std::vector<std::string> flags) {
  ServerOptions options;
  options.flags = std::move(flags);
  server_ = std::make_unique<ServerProcess>(options);
  ::testing::AssertionResult started = server_->Start();
  if (!started) {
    why_ = started.message();
    ADD_FAILURE() << "the shared server did not start: " << why_;
  }
}

void SharedServer::Reset() {
  if (server_ != nullptr && server_->running()) {
    EXPECT_TRUE(server_->Stop());
  }
  server_.reset();
}

}  // namespace hf::e2e
