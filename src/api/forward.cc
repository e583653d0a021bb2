#include "api/forward.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <nlohmann/json.hpp>
#include <string_view>
#include <thread>

#include "api/idempotency.h"

namespace hf::api {

namespace {

bool SameName(std::string_view a, std::string_view b) {
  return a.size() == b.size() &&
         std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) ==
                  std::tolower(static_cast<unsigned char>(y));
         });
}

// Hop-by-hop headers, those the HTTP client sets itself, and the
// pseudo-headers httplib's server adds to every request (REMOTE_ADDR, ...).
bool Skipped(std::string_view name) {
  static constexpr std::array<std::string_view, 10> kSkip = {
      "Host",        "Content-Length",    "Connection",
      "Keep-Alive",  "Transfer-Encoding", "REMOTE_ADDR",
      "REMOTE_PORT", "LOCAL_ADDR",        "LOCAL_PORT",
      "Content-Type"};
  return std::any_of(kSkip.begin(), kSkip.end(),
                     [&](std::string_view s) { return SameName(s, name); });
}

}  // namespace

void WriteNoLeader(httplib::Response& res, const std::string& why) {
  const nlohmann::json body = {{"error", "unavailable"}, {"message", why}};
  res.status = 503;
  res.set_header("Retry-After", "1");
  res.set_content(body.dump(), "application/json");
}

void ForwardToLeader(const httplib::Request& req, const ForwardTarget& target,
                     httplib::Response& res, const ForwardOptions& options) {
  httplib::Request out;
  out.method = req.method;
  out.path = req.target;  // path and query, still encoded
  for (const auto& [name, value] : req.headers) {
    if (!Skipped(name)) out.headers.emplace(name, value);
  }
  out.headers.emplace(kForwardedHeader, target.self_id);
  if (!req.body.empty() || req.method == "POST" || req.method == "PATCH" ||
      req.method == "PUT") {
    out.body = req.body;
    const std::string type = req.get_header_value("Content-Type");
    out.headers.emplace("Content-Type",
                        type.empty() ? "application/json" : type);
  }
  const bool post = req.method == "POST";
  // The leader records the POST under this key: every send below is the
  // same request, whichever of them it carries out.
  if (post && !req.has_header(kIdempotencyKeyHeader)) {
    StatusOr<std::string> key = NewForwardedKey();
    if (!key.ok()) {
      WriteNoLeader(res, "cannot forward: " + key.status().message());
      return;
    }
    out.headers.emplace(kIdempotencyKeyHeader, *key);
  }
  const int attempts =
      post || req.method == "GET" ? std::max(1, options.attempts) : 1;
  // Every send together takes no longer than one would (a leader that
  // hangs is not waited for three times over).
  using SteadyClock = std::chrono::steady_clock;
  const SteadyClock::time_point deadline =
      SteadyClock::now() + options.connect_timeout + options.read_timeout;
  std::chrono::milliseconds backoff = options.backoff;
  std::string why;
  int attempt = 0;
  while (attempt < attempts) {
    if (attempt > 0) {
      if (SteadyClock::now() + backoff >= deadline) break;
      std::this_thread::sleep_for(backoff);
      backoff *= 2;
    }
    ++attempt;
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - SteadyClock::now());
    httplib::Client client(target.leader_url);
    client.set_url_encode(false);  // the target is passed on as it came
    client.set_connection_timeout(std::min(options.connect_timeout, left));
    client.set_read_timeout(left);
    client.set_write_timeout(left);
    client.set_tcp_nodelay(true);
    httplib::Result result = client.send(out);
    if (!result) {
      why = "the leader, instance " + target.leader_id + " at " +
            target.leader_url + ", cannot be reached (" +
            httplib::to_string(result.error()) + ")";
      spdlog::warn("forward {} {} (send {} of {}): {}", req.method, req.path,
                   attempt, attempts, why);
      continue;
    }
    if (post && attempt < attempts && result->status == 409 &&
        result->has_header("Retry-After")) {
      // An earlier send is still being carried out: its reply is coming.
      why = "the leader is still carrying out the request";
      continue;
    }
    res.status = result->status;
    for (const auto& [name, value] : result->headers) {
      if (!Skipped(name)) res.set_header(name, value);
    }
    const std::string type = result->get_header_value("Content-Type");
    res.set_content(result->body, type.empty() ? "text/plain" : type);
    return;
  }
  WriteNoLeader(res, why + " after " + std::to_string(attempt) +
                         (attempt == 1 ? " attempt" : " attempts") +
                         "; retry shortly");
}

}  // namespace hf::api
