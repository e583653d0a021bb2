#include "cli/settings.h"

#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <utility>

namespace hf::cli {
namespace {

// The value of environment variable `name`, or nullopt when it is unset or
// empty (an empty HF_TOKEN= line in a shell profile must not mean "no auth").
std::optional<std::string> EnvValue(const char* name) {
  const char* value = std::getenv(name);  // NOLINT(concurrency-mt-unsafe)
  if (value == nullptr || *value == '\0') return std::nullopt;
  return std::string(value);
}

std::string_view TrimWhitespace(std::string_view text) {
  while (!text.empty() &&
         std::isspace(static_cast<unsigned char>(text.front()))) {
    text.remove_prefix(1);
  }
  while (!text.empty() &&
         std::isspace(static_cast<unsigned char>(text.back()))) {
    text.remove_suffix(1);
  }
  return text;
}

// Reads the whole file at `path`. Fails with NotFound when it does not exist
// and InvalidArgument when it is a directory or cannot be read.
StatusOr<std::string> ReadFile(const std::string& path) {
  std::error_code error;
  const std::filesystem::file_status status =
      std::filesystem::status(path, error);
  if (!std::filesystem::exists(status)) {
    return Status::NotFound(path + ": no such file");
  }
  if (std::filesystem::is_directory(status)) {
    return Status::InvalidArgument(path + ": is a directory");
  }
  std::ifstream in(path, std::ios::binary);
  std::ostringstream content;
  if (in) content << in.rdbuf();
  if (!in || in.bad()) {
    return Status::InvalidArgument(path + ": cannot be read");
  }
  return content.str();
}

struct ConfigFile {
  std::string path;  // "" when no file was read
  std::optional<std::string> server;
  std::optional<std::string> token;
};

// Where the config file is, and whether it was named explicitly (then a
// missing file is an error).
struct ConfigLocation {
  std::string path;  // "" when there is none (no --config, HFCTL_CONFIG, HOME)
  bool explicit_path = false;
};

ConfigLocation LocateConfig(const ConnectionFlags& flags) {
  if (!flags.config.empty()) return {flags.config, true};
  if (auto env = EnvValue("HFCTL_CONFIG")) return {*env, true};
  if (auto home = EnvValue("HOME")) {
    return {*home + "/.config/heteroflow/hfctl.json", false};
  }
  return {};
}

StatusOr<ConfigFile> LoadConfig(const ConfigLocation& where) {
  ConfigFile config;
  if (where.path.empty()) return config;
  StatusOr<std::string> text = ReadFile(where.path);
  if (!text.ok()) {
    if (text.status().code() == StatusCode::kNotFound && !where.explicit_path) {
      return config;  // no default config file: use the other sources
    }
    return Status::InvalidArgument("config file " + text.status().message());
  }
  config.path = where.path;
  const std::string prefix = "config file " + where.path + ": ";
  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(*text);
  } catch (const nlohmann::json::exception& e) {
    return Status::InvalidArgument(prefix + "not valid JSON (" + e.what() +
                                   ")");
  }
  if (!doc.is_object()) {
    return Status::InvalidArgument(prefix + "must be a JSON object");
  }
  for (const auto& [key, value] : doc.items()) {
    std::optional<std::string>* slot = nullptr;
    if (key == "server") {
      slot = &config.server;
    } else if (key == "token") {
      slot = &config.token;
    } else {
      // A misspelt key ("sever") must not be silently ignored.
      std::string message = prefix;
      message.append("unknown key \"")
          .append(key)
          .append("\" (known: server, token)");
      return Status::InvalidArgument(std::move(message), key);
    }
    if (!value.is_string()) {
      std::string message = prefix;
      message.append("\"").append(key).append("\" must be a string");
      return Status::InvalidArgument(std::move(message), key);
    }
    if (!value.get_ref<const std::string&>().empty()) {
      *slot = value.get<std::string>();
    }
  }
  return config;
}

// Parses the port of an authority; true when it is 1..65535.
bool ValidPort(std::string_view port) {
  if (port.empty() || port.size() > 5) return false;
  int number = 0;
  for (char c : port) {
    if (!std::isdigit(static_cast<unsigned char>(c))) return false;
    number = number * 10 + (c - '0');
  }
  return number >= 1 && number <= 65535;
}

}  // namespace

std::string ServerUrl::ToString() const {
  return scheme + "://" + authority + base_path;
}

StatusOr<ServerUrl> ParseServerUrl(std::string_view url) {
  const std::string quoted = "server URL \"" + std::string(url) + "\"";
  std::string_view rest = TrimWhitespace(url);
  ServerUrl out;
  if (const size_t sep = rest.find("://"); sep != std::string_view::npos) {
    out.scheme = std::string(rest.substr(0, sep));
    for (char& c : out.scheme) {
      c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    }
    rest.remove_prefix(sep + 3);
  } else {
    out.scheme = "http";
  }
  if (out.scheme != "http" && out.scheme != "https") {
    return Status::InvalidArgument(quoted +
                                   ": the scheme must be http or https");
  }
  if (rest.find_first_of("?#") != std::string_view::npos) {
    return Status::InvalidArgument(quoted +
                                   ": must not have a query or fragment");
  }
  const size_t slash = rest.find('/');
  std::string_view authority = rest.substr(0, slash);
  std::string_view path =
      slash == std::string_view::npos ? "" : rest.substr(slash);
  while (!path.empty() && path.back() == '/') path.remove_suffix(1);
  if (authority.find('@') != std::string_view::npos) {
    return Status::InvalidArgument(quoted +
                                   ": must not carry credentials; use --token");
  }

  std::string_view host = authority;
  std::string_view port;
  if (authority.starts_with('[')) {  // [v6]:port
    const size_t close = authority.find(']');
    if (close == std::string_view::npos) {
      return Status::InvalidArgument(quoted + ": unterminated IPv6 address");
    }
    host = authority.substr(1, close - 1);
    std::string_view after = authority.substr(close + 1);
    if (!after.empty()) {
      if (after.front() != ':') {
        return Status::InvalidArgument(quoted + ": bad text after the host");
      }
      port = after.substr(1);
      if (!ValidPort(port)) {
        return Status::InvalidArgument(quoted + ": bad port");
      }
    }
  } else if (const size_t colon = authority.rfind(':');
             colon != std::string_view::npos) {
    host = authority.substr(0, colon);
    port = authority.substr(colon + 1);
    if (!ValidPort(port)) {
      return Status::InvalidArgument(quoted + ": bad port");
    }
  }
  if (host.empty()) return Status::InvalidArgument(quoted + ": no host");
  out.authority = std::string(authority);
  out.host = std::string(host);
  out.base_path = std::string(path);
  return out;
}

StatusOr<Settings> ResolveSettings(const ConnectionFlags& flags) {
  const ConfigLocation location = LocateConfig(flags);
  StatusOr<ConfigFile> config = LoadConfig(location);
  if (!config.ok()) return config.status();
  const std::string config_source = "config file " + config->path;

  Settings settings;
  settings.config_path = config->path;

  std::string server;
  if (!flags.server.empty()) {
    server = flags.server;
    settings.server_source = "--server";
  } else if (auto env = EnvValue("HF_SERVER")) {
    server = *env;
    settings.server_source = "HF_SERVER";
  } else if (config->server) {
    server = *config->server;
    settings.server_source = config_source;
  } else {
    server = std::string(kDefaultServer);
    settings.server_source = "default";
  }
  StatusOr<ServerUrl> url = ParseServerUrl(server);
  if (!url.ok()) {
    return url.status().WithContext("from " + settings.server_source);
  }
  settings.server = *std::move(url);

  if (!flags.token.empty()) {
    settings.token = flags.token;
    settings.token_source = "--token";
  } else if (!flags.token_file.empty()) {
    StatusOr<std::string> text = ReadFile(flags.token_file);
    if (!text.ok()) {
      return Status::InvalidArgument("token file " + text.status().message());
    }
    settings.token = std::string(TrimWhitespace(*text));
    if (settings.token.empty()) {
      return Status::InvalidArgument("token file " + flags.token_file +
                                     ": is empty");
    }
    settings.token_source = "--token-file " + flags.token_file;
  } else if (auto env = EnvValue("HF_TOKEN")) {
    settings.token = std::string(TrimWhitespace(*env));
    settings.token_source = "HF_TOKEN";
  } else if (config->token) {
    settings.token = *config->token;
    settings.token_source = config_source;
  }
  return settings;
}

}  // namespace hf::cli
