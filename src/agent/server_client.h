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
#include <vector>

#include "common/status.h"

namespace httplib {
class Client;
}

namespace hf::agent {

using nlohmann::json;

// The agent's HTTP client of the control plane: one instance, or several
// that fail over (the first that answers is used until it stops answering).
class ServerClient {
 public:
  // `server` is "http://host:port", or several separated by commas: the
  // instances of one control plane (docs/OPERATIONS.md, "Several
  // instances"). https is refused: put TLS in front of both ends.
  // InvalidArgument naming `server` otherwise.
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
  ServerClient(std::vector<std::unique_ptr<httplib::Client>> clients,
               std::vector<std::string> urls, std::string token);
  // Sends to the current instance. When it cannot be reached (no
  // connection: nothing was sent, so any instance may take the request)
  // the next ones are tried at once; when it answers 502/503/504 or the
  // reply is lost, the call fails (the agent's loop retries) and the next
  // call goes to the next instance.
  StatusOr<json> Send(const std::string& method, const std::string& path,
                      const json* body);

  // One client per instance, in the order given. Used from the agent's one
  // loop thread only (httplib clients are not shared between threads).
  std::vector<std::unique_ptr<httplib::Client>> clients_;
  std::vector<std::string> urls_;
  std::size_t current_ = 0;
  std::string token_;
};

// Standard padded base64 (RFC 4648).
std::string EncodeBase64(std::string_view bytes);

}  // namespace hf::agent
