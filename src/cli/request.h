// One HTTP request of the REST API (docs/API.md), as hfctl builds it from the
// parsed command line, and the transport that sends it.
//
// Request is a plain value: method, path, query and JSON body, with the
// encoding rules in one place (Target). Transport is the seam between hfctl's
// logic and the network: MakeHttpTransport speaks HTTP with cpp-httplib;
// tests pass a fake.
//
// Thread-safety: Request and the free functions are plain values and pure
// functions. A Transport is used by one thread at a time.
#pragma once

#include <initializer_list>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "cli/settings.h"
#include "common/status.h"

namespace hf::cli {

struct Request {
  std::string method;  // "GET", "POST", "PATCH" or "DELETE"
  std::string path;    // unencoded segments joined by the caller; see Path()
  std::vector<std::pair<std::string, std::string>> query;  // unencoded
  std::optional<std::string> body;  // JSON text; nullopt = no body
  // More headers to send (e.g. Idempotency-Key), in order.
  std::vector<std::pair<std::string, std::string>> headers;

  // The path and the percent-encoded query ("/api/v1/tasks?status=pending").
  std::string Target() const;

  // Replaces the value of query parameter `key`, adding it when absent.
  void SetQuery(const std::string& key, std::string value);
};

// Percent-encodes every byte except the RFC 3986 unreserved characters
// (A-Z a-z 0-9 - . _ ~), so the result is safe in a path segment or a query
// key or value.
std::string UrlEncode(std::string_view text);

// "/api/v1/" + the segments, each percent-encoded ("tenants", "a b" ->
// "/api/v1/tenants/a%20b"), so a name can never add a path segment.
std::string ApiPath(std::initializer_list<std::string_view> segments);

// Parses repeated KEY=VALUE flags (--env, --label) into a map. The value is
// everything after the first '=' and may itself contain '=' or be empty.
// Fails with InvalidArgument naming `flag` when an entry has no '=', an empty
// key, or a key given twice (a repeated key is probably a mistake; keeping
// either value silently would hide it).
StatusOr<std::map<std::string, std::string>> ParseKeyValues(
    std::string_view flag, const std::vector<std::string>& entries);

struct HttpResponse {
  int status = 0;    // the HTTP status code
  std::string body;  // the raw body
};

// Sends requests to one server.
class Transport {
 public:
  virtual ~Transport() = default;

  // Sends `request` and returns the server's response, whatever its status.
  // Fails with Unavailable when no response arrived; the message is a short
  // lower-case reason ("connection refused", "connection timed out").
  virtual StatusOr<HttpResponse> Send(const Request& request) = 0;
};

// A Transport over HTTP(S) to `settings.server`, sending
// "Authorization: Bearer <token>" when the settings carry a token.
std::unique_ptr<Transport> MakeHttpTransport(const Settings& settings);

}  // namespace hf::cli
