// Path-valued command-line flags made absolute once, at start. hf-server
// and hf-agent hand paths to code that runs elsewhere (a task's
// environment, a container's mounts, the MPS daemon, a later chdir), where
// a relative path means something else or is refused; so every path flag
// is resolved against the working directory at start, or the program stops
// with an error naming the flag.
//
// Thread-safety: pure functions, except that they read the process's
// working directory.
#pragma once

#include <string>
#include <string_view>

#include "common/status.h"

namespace hf {

// Makes `value` (the value of `flag`, e.g. "--mps-dir") absolute and
// lexically normal ("./var/mps" -> "/cwd/var/mps"); an empty value stays
// empty (the flag is unset). Fails with InvalidArgument naming the flag when
// the working directory cannot be read.
Status MakeFlagPathAbsolute(std::string_view flag, std::string& value);

// For flags naming a program or library that may also be a bare name
// looked up elsewhere (PATH, the dynamic linker's search path): a value
// with a '/' is a path and is made absolute as above; a bare name is kept.
Status MakeFlagProgramAbsolute(std::string_view flag, std::string& value);

// The same for "sqlite:PATH" database URLs (--db); any other URL is kept.
Status MakeSqliteUrlAbsolute(std::string_view flag, std::string& url);

}  // namespace hf
