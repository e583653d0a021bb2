#include "common/flag_paths.h"

#include <filesystem>
#include <system_error>

namespace hf {

Status MakeFlagPathAbsolute(std::string_view flag, std::string& value) {
  if (value.empty()) return Status::Ok();
  std::error_code ec;
  const std::filesystem::path absolute = std::filesystem::absolute(value, ec);
  if (ec) {
    return Status::InvalidArgument(
        "cannot make '" + value + "' an absolute path (" + ec.message() + ")",
        std::string(flag));
  }
  std::string normal = absolute.lexically_normal().string();
  // "dir/" and "dir/." normalise to "dir/": keep "/" alone, drop the rest.
  while (normal.size() > 1 && normal.back() == '/') normal.pop_back();
  value = std::move(normal);
  return Status::Ok();
}

Status MakeFlagProgramAbsolute(std::string_view flag, std::string& value) {
  if (value.find('/') == std::string::npos) return Status::Ok();
  return MakeFlagPathAbsolute(flag, value);
}

Status MakeSqliteUrlAbsolute(std::string_view flag, std::string& url) {
  static constexpr std::string_view kScheme = "sqlite:";
  if (!url.starts_with(kScheme)) return Status::Ok();
  std::string path = url.substr(kScheme.size());
  // Already absolute, or what OpenStore refuses with a reason (no path,
  // "sqlite://...", in-memory and URI databases): kept for it to say so.
  if (path.empty() || path.starts_with('/') || path == ":memory:" ||
      path.starts_with("file:")) {
    return Status::Ok();
  }
  HF_RETURN_IF_ERROR(MakeFlagPathAbsolute(flag, path));
  url = std::string(kScheme) + path;
  return Status::Ok();
}

}  // namespace hf
