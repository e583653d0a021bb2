// ServerClient: the agent's side of the node endpoints of the REST API
// (docs/API.md "Nodes and agents"), over HTTP with a node token. Bodies are
// JSON; an HTTP error becomes a Status with the server's message (401 ->
// Unauthenticated, 403 -> PermissionDenied, 404 -> NotFound, 400 ->
// InvalidArgument, anything else or no answer -> Unavailable), so the agent
// tells "fix your token" from "the server is down, retry".
//
// Thread-safety: one request at a time per object (the agent's loop is
// single-threaded); cheap to construct.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "common/status.h"

namespace httplib {
class Client;
}

namespace hf::agent {

using nlohmann::json;

class ServerClient {
 public:
  // `server` is "http://host:port" (https is refused: put TLS in front of
  // both ends). InvalidArgument naming `server` otherwise.
  static StatusOr<std::unique_ptr<ServerClient>> Create(
      const std::string& server, std::string token);
  ~ServerClient();

  ServerClient(const ServerClient&) = delete;
  ServerClient& operator=(const ServerClient&) = delete;

  StatusOr<json> Register(const json& report);
  StatusOr<json> Heartbeat(const std::string& node, const json& report);
  StatusOr<json> Assignments(const std::string& node);
  StatusOr<json> ReportTaskStates(const std::string& node, const json& states);
  StatusOr<json> ClaimSliceRequests(const std::string& node);
  StatusOr<json> ReportSliceRequest(std::int64_t id, const json& result);
  // Ships `data` at `offset`; returns the size the server now holds.
  StatusOr<std::int64_t> ShipLog(const std::string& node, std::int64_t task_id,
                                 std::int64_t offset, std::string_view data);

 private:
  ServerClient(std::unique_ptr<httplib::Client> client, std::string token);
  StatusOr<json> Send(const std::string& method, const std::string& path,
                      const json* body);

  std::unique_ptr<httplib::Client> client_;
  std::string token_;
};

// Standard padded base64 (RFC 4648).
std::string EncodeBase64(std::string_view bytes);

}  // namespace hf::agent
