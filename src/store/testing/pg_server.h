// PgServer: a real, throwaway PostgreSQL server for tests.
//
// Start() finds `initdb` and `pg_ctl` (on PATH, else in
// /usr/lib/postgresql/15/bin), creates a cluster in a fresh temporary
// directory and starts it on a free loopback TCP port, with its Unix socket
// in that directory and fsync switched off for speed (a commit still
// reaches the kernel before it is acknowledged, so stopping the server
// loses nothing acknowledged). Logins are trusted (no password): the
// superuser is "postgres". The destructor stops the server (`pg_ctl stop
// -m immediate`) and removes the directory. PostgreSQL 15 or newer.
//
// PostgreSQL refuses to run as root. When the test runs as root (as in CI),
// the server runs as the unprivileged `postgres` system user that the
// postgresql package creates, and the directory is handed to it.
//
// A missing PostgreSQL installation is an error (the Status says what to
// install), never a silent skip: tests that need the server must fail.
//
// Thread-safety: none; use a PgServer from one thread (the test's). The
// server itself takes connections from any number of threads and processes.
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace hf::store::pg_testing {

class PgServer {
 public:
  // Creates the cluster and starts the server; Unavailable/FailedPrecondition
  // with the tools' output when something fails.
  static StatusOr<std::unique_ptr<PgServer>> Start();

  PgServer(const PgServer&) = delete;
  PgServer& operator=(const PgServer&) = delete;
  // Stops the server if it runs and removes its directory.
  ~PgServer();

  // "postgres://postgres@127.0.0.1:PORT/DATABASE".
  std::string Url(std::string_view database = "postgres") const;
  int port() const { return port_; }
  bool running() const { return running_; }

  // CREATE DATABASE `name` as a copy of `from` (no one may be connected to
  // it), or DROP DATABASE `name` (one that does not exist is OK). Names are
  // [a-z0-9_]+. REQUIRES: running().
  Status CreateDatabase(std::string_view name,
                        std::string_view from = "template1");
  Status DropDatabase(std::string_view name);

  // Stops the server at once (`-m immediate`: what a crash looks like to its
  // clients: their connections drop). The data stays for Restart().
  Status Stop();
  // Starts the stopped server again, on the same port with the same data.
  Status Restart();

 private:
  PgServer(std::string dir, std::string bin_dir, uid_t uid, gid_t gid,
           bool drop_privileges);

  // Runs `pg_ctl start` and waits until the server takes connections.
  Status StartServer();
  // Runs one of PostgreSQL's tools (as the server's user), its output going
  // to `log`; Unavailable with the log's tail if it fails or outlasts
  // `timeout_s`.
  Status RunTool(const std::string& tool, const std::vector<std::string>& args,
                 const std::string& log, int timeout_s) const;
  // Runs SQL on the "postgres" database (autocommit).
  Status Execute(const std::string& sql) const;

  const std::string dir_;      // the temporary directory: data/, logs, socket
  const std::string bin_dir_;  // holds initdb, pg_ctl and postgres
  const uid_t uid_;            // the server's user, when dropping privileges
  const gid_t gid_;
  const bool drop_privileges_;  // running as root: run the tools as uid_
  int port_ = 0;
  bool running_ = false;
};

// The directory holding initdb and pg_ctl: the first on PATH that has both,
// else /usr/lib/postgresql/15/bin. NotFound, saying what to install, when
// neither has them.
StatusOr<std::string> FindPostgresBinDir();

}  // namespace hf::store::pg_testing
