// Strict JSON for what comes from outside (request bodies, agent reports,
// files operators write): nlohmann::json's parser with the checks it does
// not make, and its exceptions turned into a Status. The one place these
// rules live; src/api (request bodies) and src/gpu (inventory files) parse
// through it.
//
// Thread-safety: pure functions.
#pragma once

#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "common/status.h"

namespace hf {

struct StrictJsonOptions {
  std::size_t max_depth = 64;  // nesting of objects and arrays
  // What errors name when the value at fault is the document itself.
  std::string top_level = "body";
  // Keys starting with this (when not empty) are comments and may repeat.
  std::string comment_prefix;
};

// Parses `text`. InvalidArgument whose field is the path of the value at
// fault ("gpus[0].memory_mb", options.top_level for the document) for:
// invalid JSON (nlohmann's line and column in the message) and nesting
// deeper than max_depth (both naming the document); a number out of range
// (1e400); a key that appears twice
// in one object, at any depth ("last one wins" would hide a misspelling);
// an empty key, or one holding a control character; a string holding NUL.
StatusOr<nlohmann::json> ParseStrictJson(std::string_view text,
                                         const StrictJsonOptions& options = {});

// Whether `text` holds a C0 control character (NUL, newline, tab, ...),
// DEL, or a C1 control (U+0080..U+009F, as UTF-8).
bool HasControlCharacter(std::string_view text);

}  // namespace hf
