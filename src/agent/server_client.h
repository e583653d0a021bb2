// ServerClient: the agent's side of the node endpoints of the REST API
// (docs/API.md "Nodes and agents"), over a Transport (HTTP, or in-process in
// the simulation) with a node token. Bodies are
// JSON; an HTTP error becomes a Status with the server's message (401 ->
// Unauthenticated, 403 -> PermissionDenied, 404 -> NotFound, 400 ->
// InvalidArgument, anything else or no answer -> Unavailable), so the agent
// tells "fix your token" from "the server is down, retry".
//
// Thread-safety: one request at a time per object (the agent's loop is
// single-threaded); cheap to construct. Transports likewise.
#pragma once

#include <cstdint>
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

// One request as it goes on the wire.
struct WireRequest {
  std::string method;  // "GET" or "POST"
  std::string path;    // "/api/v1/nodes/n1/heartbeat"
  std::string body;    // JSON text ("{}" for none)
  std::string token;   // the Bearer token
};

struct WireReply {
  int status = 0;
  std::string body;
};

// How requests reach the control plane: HTTP (HttpTransport), or in-process
// with injected faults (the whole-system simulation, src/simulation).
class Transport {
 public:
  virtual ~Transport() = default;
  // Sends `request` and returns the reply. Unavailable when none came back
  // (the request may or may not have been carried out: the caller's retry
  // must be harmless, and every node endpoint is).
  virtual StatusOr<WireReply> RoundTrip(const WireRequest& request) = 0;
  // Called from another thread: makes a RoundTrip in progress fail
  // (Unavailable) now rather than when its reply or timeout comes. The
  // default does nothing.
  virtual void Interrupt() {}
};

// HTTP to one instance, or to several that fail over (the first that
// answers is used until it stops answering). When the current instance
// cannot be reached (no connection: nothing was sent, so any instance may
// take the request) the next ones are tried at once; when it answers
// 502/503/504 or the reply is lost, the call fails (the agent's loop
// retries) and the next call goes to the next instance.
class HttpTransport final : public Transport {
 public:
  // `server` is "http://host:port", or several separated by commas: the
  // instances of one control plane (docs/OPERATIONS.md, "Several
  // instances"). https is refused: put TLS in front of both ends.
  // InvalidArgument naming `server` otherwise.
  static StatusOr<std::unique_ptr<HttpTransport>> Create(
      const std::string& server);
  ~HttpTransport() override;

  StatusOr<WireReply> RoundTrip(const WireRequest& request) override;
  void Interrupt() override;

 private:
  HttpTransport(std::vector<std::unique_ptr<httplib::Client>> clients,
                std::vector<std::string> urls);
  // One client per instance, in the order given. Used from one thread only
  // (httplib clients are not shared between threads), but for Interrupt's
  // stop(), which httplib allows from another.
  std::vector<std::unique_ptr<httplib::Client>> clients_;
  std::vector<std::string> urls_;
  std::size_t current_ = 0;
};

// The agent's client of the control plane's node endpoints, over any
// Transport.
class ServerClient {
 public:
  // Over HTTP (HttpTransport::Create's `server`), with a node token.
  static StatusOr<std::unique_ptr<ServerClient>> Create(
      const std::string& server, std::string token);
  // Over `transport`.
  ServerClient(std::unique_ptr<Transport> transport, std::string token);
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
  // GET /api/v1/nodes/{node}/work: the node's work generation once it
  // differs from `after`, or after `wait_s` seconds.
  StatusOr<json> WaitForWork(const std::string& node, std::uint64_t after,
                             int wait_s);
  // From another thread: fails the request in progress now (Transport).
  void Interrupt() { transport_->Interrupt(); }

 private:
  StatusOr<json> Send(const std::string& method, const std::string& path,
                      const json* body);

  std::unique_ptr<Transport> transport_;
  std::string token_;
};

// An HTTP status and error body as a Status: 400/413 -> InvalidArgument
// (with the body's `field`), 401 -> Unauthenticated, 403 ->
// PermissionDenied, 404 -> NotFound, 409 -> FailedPrecondition, anything
// else -> Unavailable. `what` names the request ("POST /api/...").
Status StatusFromHttp(int status, const json& body, const std::string& what);

// Standard padded base64 (RFC 4648).
std::string EncodeBase64(std::string_view bytes);

}  // namespace hf::agent
