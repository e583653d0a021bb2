#include "common/strict_json.h"

#include <functional>
#include <set>
#include <utility>
#include <vector>

namespace hf {
namespace {

using json = nlohmann::json;

// A document the parser callback refuses; thrown out of nlohmann's parser
// (its callbacks cannot return an error) and caught in ParseStrictJson.
struct Rejected {
  std::string field;
  std::string message;
};

// Where the parser is: one frame per open object or array. Tracks the keys
// seen in each object and the path of the value being parsed, so every
// error names the field.
class Walker {
 public:
  explicit Walker(const StrictJsonOptions& options) : options_(options) {}

  bool operator()(int depth, json::parse_event_t event, json& parsed) {
    switch (event) {
      case json::parse_event_t::object_start:
      case json::parse_event_t::array_start:
        if (static_cast<std::size_t>(depth) >= options_.max_depth) {
          // The document's shape is at fault, not one field.
          throw Rejected{options_.top_level,
                         "JSON nesting is deeper than " +
                             std::to_string(options_.max_depth)};
        }
        frames_.push_back(
            Frame{event == json::parse_event_t::array_start, 0, {}, {}});
        break;
      case json::parse_event_t::key:
        Key(parsed.get<std::string>());
        break;
      case json::parse_event_t::value:
        if (parsed.is_string() && parsed.get_ref<const std::string&>().find(
                                      '\0') != std::string::npos) {
          throw Rejected{Path(), "contains a NUL character"};
        }
        Completed();
        break;
      case json::parse_event_t::object_end:
      case json::parse_event_t::array_end:
        frames_.pop_back();
        Completed();
        break;
    }
    return true;
  }

  // The value being parsed: "gpus[0].index"; top_level for the document.
  std::string Path() const {
    std::string out;
    for (const Frame& f : frames_) {
      if (f.array) {
        out += "[" + std::to_string(f.index) + "]";
      } else if (!f.key.empty()) {
        if (!out.empty()) out += ".";
        out += f.key;
      }
    }
    return out.empty() ? options_.top_level : out;
  }

 private:
  struct Frame {
    bool array = false;
    std::size_t index = 0;  // arrays: elements completed so far
    std::string key;        // objects: the key being parsed
    std::set<std::string, std::less<>> keys;
  };

  void Key(std::string key) {
    Frame& f = frames_.back();
    f.key = std::move(key);
    if (f.key.empty()) {
      // Named by the object that holds it: an error must name a field.
      throw Rejected{Path(), "has a field with an empty name"};
    }
    if (HasControlCharacter(f.key)) {
      throw Rejected{Path(), "field name contains a control character"};
    }
    const bool comment = !options_.comment_prefix.empty() &&
                         f.key.starts_with(options_.comment_prefix);
    if (!comment && !f.keys.insert(f.key).second) {
      throw Rejected{
          Path(), "duplicate key '" + f.key + "' (each field may appear once)"};
    }
  }

  // A value (or a nested container) ended: the next array element begins.
  void Completed() {
    if (!frames_.empty() && frames_.back().array) ++frames_.back().index;
  }

  const StrictJsonOptions& options_;
  std::vector<Frame> frames_;
};

// What follows "[json.exception.out_of_range.406] " in nlohmann's message.
std::string Reason(const json::exception& e) {
  const std::string what = e.what();
  const auto end = what.find("] ");
  return end == std::string::npos ? what : what.substr(end + 2);
}

}  // namespace

StatusOr<nlohmann::json> ParseStrictJson(std::string_view text,
                                         const StrictJsonOptions& options) {
  Walker walker(options);
  try {
    return json::parse(text.begin(), text.end(),
                       [&](int depth, json::parse_event_t event, json& value) {
                         return walker(depth, event, value);
                       });
  } catch (const Rejected& r) {
    return Status::InvalidArgument(r.message, r.field);
  } catch (const json::out_of_range& e) {
    // A number beyond what a double holds: the field being parsed is the
    // one at fault.
    return Status::InvalidArgument("is out of range: " + Reason(e),
                                   walker.Path());
  } catch (const json::exception& e) {
    return Status::InvalidArgument("is not valid JSON: " + Reason(e),
                                   options.top_level);
  }
}

bool HasControlCharacter(std::string_view text) {
  for (std::size_t i = 0; i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c < 0x20 || c == 0x7F) return true;
    // C1 controls, U+0080..U+009F: 0xC2 0x80..0x9F in UTF-8.
    if (c == 0xC2 && i + 1 < text.size()) {
      const auto next = static_cast<unsigned char>(text[i + 1]);
      if (next >= 0x80 && next <= 0x9F) return true;
    }
  }
  return false;
}

}  // namespace hf
