// hfctl's connection settings: which server to talk to and with which token.
//
// Each setting is taken from the first source that has it, in this order:
//   1. flags: --server, --token / --token-file;
//   2. environment: HF_SERVER, HF_TOKEN (an empty variable counts as unset);
//   3. the config file, JSON {"server": ..., "token": ...}, found at --config,
//      else $HFCTL_CONFIG, else $HOME/.config/heteroflow/hfctl.json (a missing
//      default file is fine; a missing file that was named is an error);
//   4. the default server http://127.0.0.1:3333 (there is no default token).
// The server and the token are resolved independently, so a server from the
// environment and a token from the config file combine. Every Settings value
// records where it came from, so error hints can name the source.
//
// Thread-safety: ResolveSettings reads the process environment (getenv); do
// not call it while another thread changes the environment. Everything else
// is a pure function.
#pragma once

#include <string>
#include <string_view>

#include "common/status.h"

namespace hf::cli {

inline constexpr std::string_view kDefaultServer = "http://127.0.0.1:3333";

// The connection flags as given on the command line ("" = not given).
struct ConnectionFlags {
  std::string server;      // --server URL
  std::string token;       // --token TOKEN
  std::string token_file;  // --token-file PATH
  std::string config;      // --config PATH
};

// A server URL split into what the HTTP client needs. "host:port" without a
// scheme means http; a path ("/hf") is kept as a prefix for every request, so
// a server behind a reverse proxy under a sub-path works.
struct ServerUrl {
  std::string scheme;     // "http" or "https"
  std::string authority;  // "host", "host:port" or "[v6]:port"
  std::string host;       // the host alone, without brackets or port
  std::string base_path;  // "" or "/prefix" (no trailing slash)

  // "scheme://authority" + base_path.
  std::string ToString() const;
};

struct Settings {
  ServerUrl server;
  std::string server_source;  // "--server", "HF_SERVER", "config file P", ...
  std::string token;          // "" when none was found
  std::string token_source;   // "--token", "HF_TOKEN", ...; "" when no token
  std::string config_path;    // the config file consulted; "" when none
};

// Parses and normalises a server URL (trailing slashes dropped).
// Fails with InvalidArgument when the scheme is not http/https, the host is
// empty, the port is not a number in 1..65535, or the URL has a query or
// fragment.
StatusOr<ServerUrl> ParseServerUrl(std::string_view url);

// Resolves the settings from `flags`, the environment and the config file, in
// the order described at the top of this file.
// Fails with InvalidArgument when a named config file or token file is
// missing or unreadable, the config file is not a JSON object of strings with
// only the keys "server" and "token", a token file is empty, or the chosen
// server URL does not parse.
StatusOr<Settings> ResolveSettings(const ConnectionFlags& flags);

}  // namespace hf::cli
