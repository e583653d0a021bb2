// hfctl's whole behaviour behind one function, so tests can drive it with a
// fake Transport and hfctl.cc stays a thin main().
//
// Run parses the command line (CLI11), resolves the connection settings,
// builds the REST request for the chosen command (docs/API.md), sends it,
// follows `next_cursor` for `--all`, and shows the reply: a table or detail
// view by default, the server's JSON (pretty) with `-o json`. docs/CLI.md is
// the user's description of the same behaviour.
//
// Exit codes: 0 success; 1 the server answered with an HTTP error (or a reply
// that is not JSON); 2 hfctl could not send the request: bad usage, bad
// settings, or the server unreachable.
//
// Thread-safety: Run reads the process environment and, for `-f -`, stdin;
// call it from one thread at a time.
#pragma once

#include <functional>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "cli/request.h"
#include "cli/settings.h"

namespace hf::cli {

inline constexpr int kExitOk = 0;
inline constexpr int kExitServerError = 1;
inline constexpr int kExitLocalError = 2;

// Makes the Transport for the resolved settings (MakeHttpTransport in hfctl).
using TransportFactory =
    std::function<std::unique_ptr<Transport>(const Settings&)>;

// Runs one hfctl invocation. `args` are the arguments after the program
// name. Normal output goes to `out`, errors, hints and notes to `err`.
// Returns the exit code (see the top of this file). `make_transport` is
// called at most once, only after the command line and settings are valid.
int Run(const std::vector<std::string>& args,
        const TransportFactory& make_transport, std::ostream& out,
        std::ostream& err);

}  // namespace hf::cli
