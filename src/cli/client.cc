#include "cli/client.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "cli/render.h"

namespace hf::cli {
namespace {

// What a leaf command does once the command line is parsed: how to build its
// request, and how to show the reply in table mode.
struct Action {
  std::function<StatusOr<Request>()> build;
  // For list commands: the rows' resource, the plural noun for messages, and
  // whether --all asks to follow next_cursor.
  std::optional<Resource> list_of;
  std::string noun;
  const bool* follow_all = nullptr;
  // For a list that grows (the history): --follow polls it for new rows,
  // every *follow_interval_s seconds, until interrupted.
  const bool* follow_new = nullptr;
  const double* follow_interval_s = nullptr;
  // For everything else: how to show the reply.
  std::function<void(const Json& reply, std::ostream& out)> show;
  // Optional: what to tell on stderr about the reply (the server's
  // warnings); not with --output json, whose reply carries them.
  std::function<void(const Json& reply, std::ostream& err)> notes;
};

// --limit / --cursor / --all, shared by every list command.
struct PageOptions {
  std::optional<std::int64_t> limit;
  std::optional<std::string> cursor;
  bool all = false;
};

struct TaskCreateOptions {
  std::string file;
  std::optional<std::string> name, image, command, gpu_type, tenant;
  std::optional<std::string> compute_mode;
  std::optional<std::int64_t> gpus, memory_mb;
  std::optional<double> compute;
  bool preemptible = false;
  std::vector<std::string> env, labels;
};

struct TaskListOptions {
  std::optional<std::string> status, tenant;
  PageOptions page;
};

struct SliceListOptions {
  std::optional<std::string> node, state;
  std::optional<std::int64_t> gpu_index;
  PageOptions page;
};

struct SliceHistoryOptions {
  std::optional<std::int64_t> slice_id, task_id;
  PageOptions page;
  bool follow = false;
  double interval_s = 2;
};

struct SliceCreateOptions {
  std::optional<std::string> tenant, node, reason;
  std::optional<std::int64_t> gpu_index, memory_mb;
  std::optional<double> compute;
};

struct SliceDeleteOptions {
  std::int64_t id = 0;
  std::optional<std::string> reason;
};

struct SliceResizeOptions {
  std::int64_t id = 0;
  std::int64_t memory_mb = 0;
  std::optional<std::string> reason;
};

struct TenantCreateOptions {
  std::string name;
  std::optional<std::string> group;
};

struct TenantSetGroupOptions {
  std::string name;
  std::optional<std::string> group;
  bool none = false;
};

struct TokenCreateOptions {
  std::string role;
  std::optional<std::string> tenant, description, node;
};

struct ApprovalCreateOptions {
  std::string tenant_a, tenant_b, reason;
  std::optional<std::string> expires_at;
  std::optional<std::int64_t> ttl_s;
};

struct SliceRequestListOptions {
  std::optional<std::string> node, state;
  PageOptions page;
};

// Sets `body[key]` when the option was given.
template <typename T>
void SetIfGiven(Json& body, const char* key, const std::optional<T>& value) {
  if (value) body[key] = *value;
}

template <typename T>
void QueryIfGiven(Request& request, const char* key,
                  const std::optional<T>& value) {
  if (!value) return;
  if constexpr (std::is_same_v<T, std::string>) {
    request.query.emplace_back(key, *value);
  } else {
    request.query.emplace_back(key, std::to_string(*value));
  }
}

void ApplyPage(const PageOptions& page, Request& request) {
  QueryIfGiven(request, "limit", page.limit);
  QueryIfGiven(request, "cursor", page.cursor);
}

Request Get(std::string path) { return {"GET", std::move(path), {}, {}}; }

Request WithBody(std::string method, std::string path, const Json& body) {
  return {std::move(method), std::move(path), {}, body.dump()};
}

// Reads a request body file; "-" is stdin. Fails with InvalidArgument when
// it cannot be read or is empty (an empty body is never what was meant).
StatusOr<std::string> ReadBodyFile(const std::string& path) {
  std::ostringstream content;
  if (path == "-") {
    content << std::cin.rdbuf();
  } else if (std::ifstream in(path, std::ios::binary); in) {
    content << in.rdbuf();
  }
  std::string body = content.str();
  if (body.empty()) {
    return Status::InvalidArgument("-f " + path +
                                   ": cannot be read, or is empty");
  }
  return body;
}

StatusOr<Request> BuildTaskCreate(const TaskCreateOptions& options) {
  const std::string path = ApiPath({"tasks"});
  const bool any_field =
      options.name || options.image || options.command || options.gpu_type ||
      options.gpus || options.memory_mb || options.compute ||
      options.compute_mode || options.preemptible || !options.env.empty() ||
      !options.labels.empty() || options.tenant;
  if (!options.file.empty()) {
    if (any_field) {
      return Status::InvalidArgument(
          "tasks create: -f sends the file as the whole body; put every "
          "field in the file instead of adding task options");
    }
    // Sent as is: the server's validation (one place for the rules) reports
    // any problem with the file's content.
    StatusOr<std::string> body = ReadBodyFile(options.file);
    if (!body.ok()) return body.status();
    return Request{"POST", path, {}, *std::move(body)};
  }
  if (!options.name) {
    return Status::InvalidArgument(
        "tasks create: --name is required (or give the whole body with -f "
        "FILE.json)");
  }
  StatusOr<std::map<std::string, std::string>> env =
      ParseKeyValues("--env", options.env);
  if (!env.ok()) return env.status();
  StatusOr<std::map<std::string, std::string>> labels =
      ParseKeyValues("--label", options.labels);
  if (!labels.ok()) return labels.status();

  Json body = Json::object();
  body["name"] = *options.name;
  SetIfGiven(body, "image", options.image);
  SetIfGiven(body, "command", options.command);
  SetIfGiven(body, "gpu_type", options.gpu_type);
  SetIfGiven(body, "gpu_required", options.gpus);
  SetIfGiven(body, "gpu_memory_mb", options.memory_mb);
  SetIfGiven(body, "gpu_compute_ratio", options.compute);
  SetIfGiven(body, "gpu_compute_mode", options.compute_mode);
  if (options.preemptible) body["preemptible"] = true;
  if (!env->empty()) body["env"] = *env;
  if (!labels->empty()) body["labels"] = *labels;
  SetIfGiven(body, "tenant", options.tenant);
  return WithBody("POST", path, body);
}

// Table views of a single object: a one-row table of `resource`.
std::function<void(const Json&, std::ostream&)> OneRow(Resource resource) {
  return [resource](const Json& reply, std::ostream& out) {
    RenderTable(resource, Json::array({reply}), out);
  };
}

// The server's `warnings` (e.g. of a resized slice), one line each.
void ShowWarnings(const Json& reply, std::ostream& err) {
  const auto warnings = reply.find("warnings");
  if (warnings == reply.end() || !warnings->is_array()) return;
  for (const Json& w : *warnings) {
    if (w.is_string()) err << "warning: " << w.get<std::string>() << "\n";
  }
}

void ShowDetail(const Json& reply, std::ostream& out) {
  RenderDetail(reply, out);
}

// The agent's note that the hook does not enforce the slice or task of a
// reply, as a warning on stderr (the detail view shows it as a field too,
// but a field among thirty is easy to miss).
std::function<void(const Json&, std::ostream&)> EnforcementNotes(
    Resource resource) {
  return [resource](const Json& reply, std::ostream& err) {
    err << EnforcementWarnings(resource, Json::array({reply}));
  };
}

void ShowCreatedToken(const Json& reply, std::ostream& out) {
  out << "Created token " << CellText(reply, "id") << " (role "
      << CellText(reply, "role") << ", tenant " << CellText(reply, "tenant")
      << ").\n";
  const auto secret = reply.find("token");
  if (secret == reply.end() || !secret->is_string()) {
    out << "The server's reply carries no secret.\n";
    return;
  }
  out << "Its secret is shown only this once; store it now (for example in a "
         "file for --token-file):\n\n    "
      << secret->get<std::string>() << "\n\n";
}

// The command line: CLI11's app plus the storage every option writes into.
// Each leaf command's callback records its Action; Run executes it.
//
// Not copyable or movable: the callbacks point into this object.
class CommandLine {
 public:
  CommandLine() {
    app_.name("hfctl");
    app_.description(
        "hfctl: the HeteroFlow command-line client (tasks, GPU slices, "
        "nodes, tenants, tokens).");
    app_.require_subcommand(1);
    // Global options may also follow the subcommand ("tasks list -o json");
    // subcommands inherit this setting when they are created.
    app_.fallthrough();
    app_.set_version_flag("--version", "hfctl 0.1.0");
    app_.footer(
        "Settings, first found wins: --server/--token/--token-file; "
        "HF_SERVER/HF_TOKEN; the config file (--config, $HFCTL_CONFIG, "
        "~/.config/heteroflow/hfctl.json); server http://127.0.0.1:3333.\n"
        "Exit codes: 0 ok; 1 the server answered with an error; 2 usage, "
        "settings, or server unreachable.\n");

    app_.add_option("--server", connection_.server,
                    "server URL (default http://127.0.0.1:3333)");
    CLI::Option* token =
        app_.add_option("--token", connection_.token, "API token (Bearer)");
    CLI::Option* token_file = app_.add_option(
        "--token-file", connection_.token_file, "file holding the API token");
    token->excludes(token_file);
    app_.add_option("--config", connection_.config,
                    "config file (JSON {\"server\", \"token\"})");
    app_.add_option("-o,--output", output_, "output format: table or json")
        ->check(CLI::IsMember({"table", "json"}));

    AddWhoami();
    AddTasks();
    AddSlices();
    AddNodes();
    AddTenants();
    AddGroups();
    AddTokens();
    AddApprovals();
    AddDefrag();
    AddSliceRequests();
  }
  CommandLine(const CommandLine&) = delete;
  CommandLine& operator=(const CommandLine&) = delete;

  CLI::App& app() { return app_; }
  const ConnectionFlags& connection() const { return connection_; }
  bool json_output() const { return output_ == "json"; }
  // The parsed leaf command; nullopt before a successful parse.
  const std::optional<Action>& action() const { return action_; }

 private:
  // Adds leaf command `name` under `parent`; `action` becomes the chosen one
  // when the command line names this leaf.
  CLI::App* Leaf(CLI::App* parent, const std::string& name,
                 const std::string& description, Action action) {
    CLI::App* leaf = parent->add_subcommand(name, description);
    leaf->callback(
        [this, action = std::move(action)]() mutable { action_ = action; });
    return leaf;
  }

  CLI::App* Group(const std::string& name, const std::string& description) {
    CLI::App* group = app_.add_subcommand(name, description);
    group->require_subcommand(1);
    return group;
  }

  static Action ListAction(Resource resource, std::string noun,
                           const PageOptions& page,
                           std::function<Request()> build) {
    Action action;
    action.build = [build = std::move(build)]() -> StatusOr<Request> {
      return build();
    };
    action.list_of = resource;
    action.noun = std::move(noun);
    action.follow_all = &page.all;
    return action;
  }

  static Action ShowAction(
      std::function<StatusOr<Request>()> build,
      std::function<void(const Json&, std::ostream&)> show,
      std::function<void(const Json&, std::ostream&)> notes = nullptr) {
    Action action;
    action.build = std::move(build);
    action.show = std::move(show);
    action.notes = std::move(notes);
    return action;
  }

  static void AddPageOptions(CLI::App* command, PageOptions& page) {
    command->add_option("--limit", page.limit, "page size (1..1000)");
    command->add_option("--cursor", page.cursor,
                        "start at this page (a next_cursor value)");
    command->add_flag("--all", page.all, "fetch every page (follow cursors)");
  }

  static CLI::Option* AddId(CLI::App* command, std::int64_t& id,
                            const std::string& what) {
    return command->add_option("ID", id, what)
        ->required()
        ->check(CLI::PositiveNumber);
  }

  static CLI::Option* AddMulti(CLI::App* command, const std::string& name,
                               std::vector<std::string>& values,
                               const std::string& description) {
    // One value per flag: "--env A=1 B=2" is an error, not two variables, so
    // a stray word can never become an environment variable unnoticed.
    return command->add_option(name, values, description)
        ->expected(1)
        ->allow_extra_args(false)
        ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  }

  void AddWhoami() {
    Leaf(&app_, "whoami", "show the token's role and tenant",
         ShowAction([] { return Get(ApiPath({"whoami"})); }, ShowDetail));
  }

  void AddTasks() {
    CLI::App* tasks = Group("tasks", "create, list, inspect, cancel tasks");

    CLI::App* create =
        Leaf(tasks, "create", "submit a task",
             ShowAction([this] { return BuildTaskCreate(task_create_); },
                        OneRow(Resource::kTask)));
    TaskCreateOptions& o = task_create_;
    create->add_option("-f,--file", o.file,
                       "send this JSON file as the body, as is ('-': stdin); "
                       "no other task options then");
    create->add_option("--name", o.name, "task name (required unless -f)");
    create->add_option("--image", o.image, "container image");
    create->add_option("--command", o.command, "command line");
    create->add_option("--gpu-type", o.gpu_type, "GPU vendor (default nvidia)");
    create->add_option("--gpus", o.gpus,
                       "whole GPUs (gpu_required); not with a slice");
    create->add_option("--memory", o.memory_mb,
                       "GPU memory slice in MB (gpu_memory_mb, >= 32)");
    create->add_option("--compute", o.compute,
                       "GPU compute share in (0, 1] (gpu_compute_ratio)");
    create->add_option("--gpu-compute-mode", o.compute_mode,
                       "how the hook shares the GPU's time: strict or "
                       "work-conserving (gpu_compute_mode; default "
                       "work-conserving)");
    create->add_flag("--preemptible", o.preemptible, "may be preempted");
    AddMulti(create, "--env", o.env,
             "environment variable KEY=VALUE (repeatable)");
    AddMulti(create, "--label", o.labels, "label KEY=VALUE (repeatable)");
    create->add_option("--tenant", o.tenant, "submit for this tenant (admins)");

    CLI::App* list =
        Leaf(tasks, "list", "list tasks",
             ListAction(Resource::kTask, "tasks", task_list_.page, [this] {
               Request request = Get(ApiPath({"tasks"}));
               QueryIfGiven(request, "status", task_list_.status);
               QueryIfGiven(request, "tenant", task_list_.tenant);
               ApplyPage(task_list_.page, request);
               return request;
             }));
    list->add_option("--status", task_list_.status,
                     "pending, scheduled, running, succeeded, failed or "
                     "cancelled");
    list->add_option("--tenant", task_list_.tenant,
                     "only this tenant (admins)");
    AddPageOptions(list, task_list_.page);

    AddId(Leaf(tasks, "get", "show one task",
               ShowAction(
                   [this] {
                     return Get(ApiPath({"tasks", std::to_string(task_id_)}));
                   },
                   ShowDetail, EnforcementNotes(Resource::kTask))),
          task_id_, "task id");
    CLI::App* logs = Leaf(
        tasks, "logs", "print a task's output (as its agent shipped it)",
        ShowAction(
            [this] {
              Request request =
                  Get(ApiPath({"tasks", std::to_string(task_id_), "logs"}));
              QueryIfGiven(request, "offset", task_log_offset_);
              QueryIfGiven(request, "limit", task_log_limit_);
              return request;
            },
            [](const Json& reply, std::ostream& out) {
              const auto data = reply.find("data");
              if (data != reply.end() && data->is_string()) {
                out << data->get<std::string>();
              }
              if (reply.value("truncated", false)) {
                out << "\n[the server keeps the first 8 MiB of a log; the "
                       "rest was dropped]\n";
              }
            }));
    AddId(logs, task_id_, "task id");
    logs->add_option("--offset", task_log_offset_, "start at this byte");
    logs->add_option("--limit", task_log_limit_,
                     "at most this many bytes (default 65536)");
    AddId(Leaf(tasks, "cancel", "cancel a task",
               ShowAction(
                   [this]() -> StatusOr<Request> {
                     return WithBody(
                         "POST",
                         ApiPath({"tasks", std::to_string(task_id_), "cancel"}),
                         Json::object());
                   },
                   OneRow(Resource::kTask))),
          task_id_, "task id");
  }

  void AddSlices() {
    CLI::App* slices =
        Group("slices", "inspect GPU slices, stats, history; reserve, release");

    CLI::App* list =
        Leaf(slices, "list", "list live slices (--state released|all for more)",
             ListAction(Resource::kSlice, "slices", slice_list_.page, [this] {
               Request request = Get(ApiPath({"slices"}));
               QueryIfGiven(request, "node_id", slice_list_.node);
               QueryIfGiven(request, "gpu_index", slice_list_.gpu_index);
               QueryIfGiven(request, "state", slice_list_.state);
               ApplyPage(slice_list_.page, request);
               return request;
             }));
    list->add_option("--node", slice_list_.node, "only this node");
    list->add_option("--gpu-index", slice_list_.gpu_index, "only this GPU");
    list->add_option("--state", slice_list_.state,
                     "allocated, releasing, released or all");
    AddPageOptions(list, slice_list_.page);

    AddId(Leaf(slices, "get", "show one slice",
               ShowAction(
                   [this] {
                     return Get(ApiPath({"slices", std::to_string(slice_id_)}));
                   },
                   ShowDetail, EnforcementNotes(Resource::kSlice))),
          slice_id_, "slice id");

    Leaf(slices, "stats", "capacity, usage and fragmentation",
         ShowAction(
             [] {
               return Get(ApiPath({"slices", "stats"}));
             },
             ShowDetail));

    Action history_action =
        ListAction(Resource::kHistoryEntry, "history entries",
                   slice_history_.page, [this] {
                     Request request = Get(ApiPath({"slices", "history"}));
                     ApplyPage(slice_history_.page, request);
                     QueryIfGiven(request, "slice_id", slice_history_.slice_id);
                     QueryIfGiven(request, "task_id", slice_history_.task_id);
                     return request;
                   });
    history_action.follow_new = &slice_history_.follow;
    history_action.follow_interval_s = &slice_history_.interval_s;
    CLI::App* history = Leaf(slices, "history", "the slice operation log",
                             std::move(history_action));
    AddPageOptions(history, slice_history_.page);
    CLI::Option* follow = history->add_flag(
        "-f,--follow", slice_history_.follow,
        "show the log, then keep showing new entries as they come (until "
        "interrupted; each batch a table, or one JSON object per line with "
        "-o json)");
    follow->excludes("--all");
    history
        ->add_option("--interval", slice_history_.interval_s,
                     "seconds between polls with --follow")
        ->check(CLI::Range(0.0, 3600.0))
        ->capture_default_str();
    history->add_option("--slice", slice_history_.slice_id,
                        "only this slice's entries");
    history->add_option("--task", slice_history_.task_id,
                        "only this task's entries");

    CLI::App* create = Leaf(
        slices, "create", "reserve a slice with no task (admin, tenant-admin)",
        ShowAction(
            [this]() -> StatusOr<Request> {
              const SliceCreateOptions& o = slice_create_;
              Json body = Json::object();
              SetIfGiven(body, "tenant", o.tenant);
              SetIfGiven(body, "node_id", o.node);
              SetIfGiven(body, "gpu_index", o.gpu_index);
              SetIfGiven(body, "gpu_memory_mb", o.memory_mb);
              SetIfGiven(body, "gpu_compute_ratio", o.compute);
              SetIfGiven(body, "reason", o.reason);
              return WithBody("POST", ApiPath({"slices"}), body);
            },
            OneRow(Resource::kSlice)));
    create->add_option("--tenant", slice_create_.tenant, "owning tenant");
    create->add_option("--node", slice_create_.node,
                       "node (default: the scheduler places it)");
    create->add_option("--gpu-index", slice_create_.gpu_index, "GPU index");
    create->add_option("--memory", slice_create_.memory_mb,
                       "GPU memory in MB (gpu_memory_mb)");
    create->add_option("--compute", slice_create_.compute,
                       "compute share in (0, 1] (gpu_compute_ratio)");
    create->add_option("--reason", slice_create_.reason, "why (logged)");

    CLI::App* del =
        Leaf(slices, "delete", "release a slice (admin, tenant-admin)",
             ShowAction(
                 [this]() -> StatusOr<Request> {
                   Request request{
                       "DELETE",
                       ApiPath({"slices", std::to_string(slice_delete_.id)}),
                       {},
                       {}};
                   QueryIfGiven(request, "reason", slice_delete_.reason);
                   return request;
                 },
                 OneRow(Resource::kSlice)));
    AddId(del, slice_delete_.id, "slice id");
    del->add_option("--reason", slice_delete_.reason, "why (logged)");

    Action resize_action = ShowAction(
        [this]() -> StatusOr<Request> {
          const SliceResizeOptions& o = slice_resize_;
          Json body = Json::object();
          body["memory_mb"] = o.memory_mb;
          SetIfGiven(body, "reason", o.reason);
          return WithBody("PATCH", ApiPath({"slices", std::to_string(o.id)}),
                          body);
        },
        OneRow(Resource::kSlice));
    resize_action.notes = ShowWarnings;
    CLI::App* resize =
        Leaf(slices, "resize",
             "change a live slice's memory quota; the running task sees it "
             "without a restart (admin, tenant-admin)",
             std::move(resize_action));
    AddId(resize, slice_resize_.id, "slice id");
    resize
        ->add_option("--memory-mb", slice_resize_.memory_mb,
                     "the new quota in MB (>= 32, a multiple of 32)")
        ->required();
    resize->add_option("--reason", slice_resize_.reason, "why (logged)");
  }

  void AddNodes() {
    CLI::App* nodes = Group("nodes", "inspect nodes and their GPUs (admin)");
    AddPageOptions(Leaf(nodes, "list", "list nodes",
                        ListAction(Resource::kNode, "nodes", node_page_,
                                   [this] {
                                     Request request = Get(ApiPath({"nodes"}));
                                     ApplyPage(node_page_, request);
                                     return request;
                                   })),
                   node_page_);
    Leaf(nodes, "get", "show one node and its GPUs",
         ShowAction(
             [this] {
               return Get(ApiPath({"nodes", node_name_}));
             },
             ShowDetail))
        ->add_option("NAME", node_name_, "node name")
        ->required();
  }

  void AddTenants() {
    CLI::App* tenants = Group("tenants", "manage tenants (admin)");

    CLI::App* create =
        Leaf(tenants, "create", "create a tenant",
             ShowAction(
                 [this]() -> StatusOr<Request> {
                   Json body = Json::object();
                   body["name"] = tenant_create_.name;
                   SetIfGiven(body, "shared_group", tenant_create_.group);
                   return WithBody("POST", ApiPath({"tenants"}), body);
                 },
                 OneRow(Resource::kTenant)));
    create->add_option("NAME", tenant_create_.name, "tenant name")->required();
    create->add_option("--group", tenant_create_.group,
                       "shared tenant group (created when new)");

    AddPageOptions(Leaf(tenants, "list", "list tenants",
                        ListAction(Resource::kTenant, "tenants", tenant_page_,
                                   [this] {
                                     Request request =
                                         Get(ApiPath({"tenants"}));
                                     ApplyPage(tenant_page_, request);
                                     return request;
                                   })),
                   tenant_page_);

    Leaf(tenants, "get", "show one tenant",
         ShowAction(
             [this] {
               return Get(ApiPath({"tenants", tenant_name_}));
             },
             ShowDetail))
        ->add_option("NAME", tenant_name_, "tenant name")
        ->required();

    CLI::App* set_group = Leaf(
        tenants, "set-group", "put a tenant in a shared group, or none",
        ShowAction(
            [this]() -> StatusOr<Request> {
              const TenantSetGroupOptions& o = tenant_set_group_;
              if (o.none == o.group.has_value()) {
                return Status::InvalidArgument(
                    "tenants set-group: give a GROUP or --none (not both)");
              }
              Json body = Json::object();
              body["shared_group"] = o.none ? Json(nullptr) : Json(*o.group);
              return WithBody("PATCH", ApiPath({"tenants", o.name}), body);
            },
            OneRow(Resource::kTenant)));
    set_group->add_option("NAME", tenant_set_group_.name, "tenant name")
        ->required();
    set_group->add_option("GROUP", tenant_set_group_.group, "group name");
    set_group->add_flag("--none", tenant_set_group_.none,
                        "leave its group: share with no other tenant");
  }

  void AddGroups() {
    CLI::App* groups = Group("groups", "manage shared tenant groups (admin)");
    Leaf(groups, "create", "create a group",
         ShowAction(
             [this]() -> StatusOr<Request> {
               Json body = Json::object();
               body["name"] = group_name_;
               return WithBody("POST", ApiPath({"groups"}), body);
             },
             OneRow(Resource::kGroup)))
        ->add_option("NAME", group_name_, "group name")
        ->required();
    AddPageOptions(Leaf(groups, "list", "list groups and their tenants",
                        ListAction(Resource::kGroup, "groups", group_page_,
                                   [this] {
                                     Request request = Get(ApiPath({"groups"}));
                                     ApplyPage(group_page_, request);
                                     return request;
                                   })),
                   group_page_);
    Leaf(groups, "delete", "delete a group (its tenants stop sharing)",
         ShowAction(
             [this]() -> StatusOr<Request> {
               return Request{
                   "DELETE", ApiPath({"groups", group_name_}), {}, {}};
             },
             [this](const Json&, std::ostream& out) {
               out << "Deleted group " << group_name_ << ".\n";
             }))
        ->add_option("NAME", group_name_, "group name")
        ->required();
  }

  void AddTokens() {
    CLI::App* tokens =
        Group("tokens", "manage API tokens (admin, tenant-admin)");

    CLI::App* create =
        Leaf(tokens, "create", "create a token; prints its secret once",
             ShowAction(
                 [this]() -> StatusOr<Request> {
                   Json body = Json::object();
                   body["role"] = token_create_.role;
                   SetIfGiven(body, "tenant", token_create_.tenant);
                   SetIfGiven(body, "description", token_create_.description);
                   SetIfGiven(body, "node", token_create_.node);
                   return WithBody("POST", ApiPath({"tokens"}), body);
                 },
                 ShowCreatedToken));
    create
        ->add_option("--role", token_create_.role,
                     "admin, tenant-admin, user, node or metrics")
        ->required();
    create->add_option("--tenant", token_create_.tenant, "the token's tenant");
    create->add_option("--description", token_create_.description,
                       "what it is for");
    create->add_option("--node", token_create_.node,
                       "role node: the one node the token may act for");

    AddPageOptions(Leaf(tokens, "list", "list tokens (no secrets)",
                        ListAction(Resource::kToken, "tokens", token_page_,
                                   [this] {
                                     Request request = Get(ApiPath({"tokens"}));
                                     ApplyPage(token_page_, request);
                                     return request;
                                   })),
                   token_page_);

    AddId(Leaf(tokens, "revoke", "revoke a token",
               ShowAction(
                   [this]() -> StatusOr<Request> {
                     return Request{
                         "DELETE",
                         ApiPath({"tokens", std::to_string(token_id_)}),
                         {},
                         {}};
                   },
                   OneRow(Resource::kToken))),
          token_id_, "token id");
  }

  void AddApprovals() {
    CLI::App* approvals =
        Group("approvals",
              "let two tenants outside one shared group share GPUs (admin)");
    CLI::App* create = Leaf(
        approvals, "create", "approve two tenants sharing GPUs",
        ShowAction(
            [this]() -> StatusOr<Request> {
              const ApprovalCreateOptions& o = approval_create_;
              if (o.expires_at.has_value() == o.ttl_s.has_value()) {
                return Status::InvalidArgument(
                    "approvals create: give --expires-at or --ttl (one)");
              }
              Json body = Json::object();
              body["tenant_a"] = o.tenant_a;
              body["tenant_b"] = o.tenant_b;
              body["reason"] = o.reason;
              SetIfGiven(body, "expires_at", o.expires_at);
              SetIfGiven(body, "ttl_s", o.ttl_s);
              return WithBody("POST", ApiPath({"sharing-approvals"}), body);
            },
            OneRow(Resource::kApproval)));
    create->add_option("TENANT_A", approval_create_.tenant_a, "a tenant")
        ->required();
    create->add_option("TENANT_B", approval_create_.tenant_b, "the other")
        ->required();
    create->add_option("--reason", approval_create_.reason, "why (recorded)")
        ->required();
    create->add_option("--ttl", approval_create_.ttl_s, "lifetime in seconds");
    create->add_option("--expires-at", approval_create_.expires_at,
                       "RFC 3339 time, e.g. 2026-12-24T18:00:00Z");
    AddPageOptions(
        Leaf(approvals, "list", "list approvals, active and past",
             ListAction(Resource::kApproval, "approvals", approval_page_,
                        [this] {
                          Request request = Get(ApiPath({"sharing-approvals"}));
                          ApplyPage(approval_page_, request);
                          return request;
                        })),
        approval_page_);
    AddId(Leaf(approvals, "revoke", "revoke an approval",
               ShowAction(
                   [this]() -> StatusOr<Request> {
                     return Request{"DELETE",
                                    ApiPath({"sharing-approvals",
                                             std::to_string(approval_id_)}),
                                    {},
                                    {}};
                   },
                   OneRow(Resource::kApproval))),
          approval_id_, "approval id");
  }

  void AddDefrag() {
    CLI::App* defrag = Group(
        "defrag", "defragmentation plans: move preemptible tasks (admin)");
    CLI::App* plan =
        Leaf(defrag, "plan", "propose a plan (applies nothing)",
             ShowAction(
                 [this]() -> StatusOr<Request> {
                   Json body = Json::object();
                   SetIfGiven(body, "node_id", defrag_node_);
                   SetIfGiven(body, "goal_memory_mb", defrag_goal_mb_);
                   SetIfGiven(body, "max_moves", defrag_max_moves_);
                   return WithBody("POST", ApiPath({"defrag", "plans"}), body);
                 },
                 OneRow(Resource::kDefragPlan)));
    plan->add_option("--node", defrag_node_, "make room on this node only");
    plan->add_option("--goal-mb", defrag_goal_mb_,
                     "make room for a slice of this many MiB");
    plan->add_option("--max-moves", defrag_max_moves_,
                     "at most this many moves (1..64, default 8)");
    AddPageOptions(
        Leaf(defrag, "list", "list plans",
             ListAction(Resource::kDefragPlan, "plans", defrag_page_,
                        [this] {
                          Request request = Get(ApiPath({"defrag", "plans"}));
                          ApplyPage(defrag_page_, request);
                          return request;
                        })),
        defrag_page_);
    AddId(Leaf(defrag, "show", "one plan with its moves",
               ShowAction(
                   [this]() -> StatusOr<Request> {
                     return Get(ApiPath(
                         {"defrag", "plans", std::to_string(defrag_id_)}));
                   },
                   OneRow(Resource::kDefragPlan))),
          defrag_id_, "plan id");
    for (const char* verb : {"apply", "cancel"}) {
      const std::string what = verb;
      AddId(Leaf(defrag, what,
                 what == "apply" ? "apply a proposed plan, move by move"
                                 : "cancel a plan (after the move in flight)",
                 ShowAction(
                     [this, what]() -> StatusOr<Request> {
                       return WithBody(
                           "POST",
                           ApiPath({"defrag", "plans",
                                    std::to_string(defrag_id_), what}),
                           Json::object());
                     },
                     OneRow(Resource::kDefragPlan))),
            defrag_id_, "plan id");
    }
  }

  void AddSliceRequests() {
    CLI::App* requests =
        Group("slice-requests", "the MIG command channel (admin)");
    CLI::App* list = Leaf(
        requests, "list", "list MIG create/destroy commands",
        ListAction(Resource::kSliceRequest, "slice requests",
                   slice_request_list_.page, [this] {
                     Request request = Get(ApiPath({"slice-requests"}));
                     QueryIfGiven(request, "node_id", slice_request_list_.node);
                     QueryIfGiven(request, "state", slice_request_list_.state);
                     ApplyPage(slice_request_list_.page, request);
                     return request;
                   }));
    list->add_option("--node", slice_request_list_.node, "only this node");
    list->add_option("--state", slice_request_list_.state,
                     "pending, claimed, done, failed or stuck");
    AddPageOptions(list, slice_request_list_.page);
  }

  CLI::App app_;
  ConnectionFlags connection_;
  std::string output_ = "table";
  std::optional<Action> action_;

  TaskCreateOptions task_create_;
  TaskListOptions task_list_;
  std::int64_t task_id_ = 0;
  std::optional<std::int64_t> task_log_offset_;
  std::optional<std::int64_t> task_log_limit_;
  SliceListOptions slice_list_;
  std::int64_t slice_id_ = 0;
  SliceHistoryOptions slice_history_;
  SliceCreateOptions slice_create_;
  SliceDeleteOptions slice_delete_;
  SliceResizeOptions slice_resize_;
  PageOptions node_page_;
  std::string node_name_;
  TenantCreateOptions tenant_create_;
  PageOptions tenant_page_;
  std::string tenant_name_;
  TenantSetGroupOptions tenant_set_group_;
  std::string group_name_;
  PageOptions group_page_;
  TokenCreateOptions token_create_;
  PageOptions token_page_;
  std::int64_t token_id_ = 0;
  ApprovalCreateOptions approval_create_;
  PageOptions approval_page_;
  PageOptions defrag_page_;
  std::int64_t defrag_id_ = 0;
  std::optional<std::string> defrag_node_;
  std::optional<std::int64_t> defrag_goal_mb_;
  std::optional<int> defrag_max_moves_;
  std::int64_t approval_id_ = 0;
  SliceRequestListOptions slice_request_list_;
};

// The outcome of one exchange: the parsed reply, or the exit code after the
// error was written.
struct Exchange {
  std::optional<Json> reply;
  int exit_code = kExitOk;
};

// A fresh Idempotency-Key for one POST of this invocation (docs/API.md,
// "Idempotent POSTs"): 128 random bits.
std::string NewIdempotencyKey() {
  std::random_device random;
  static constexpr char kHex[] = "0123456789abcdef";
  std::string key = "hfctl-";
  for (int i = 0; i < 4; ++i) {
    std::uint32_t word = random();
    for (int j = 0; j < 8; ++j) {
      key.push_back(kHex[word & 0xf]);
      word >>= 4;
    }
  }
  return key;
}

bool HasHeader(const Request& request, std::string_view name) {
  return std::any_of(request.headers.begin(), request.headers.end(),
                     [&](const auto& header) { return header.first == name; });
}

// A failure after which the server may have carried the request out: the
// connection broke or timed out once the request was (being) sent. A
// refused connection or an unknown host name never reached it.
bool MayHaveReachedTheServer(std::string_view reason) {
  return reason != "connection refused" &&
         !reason.starts_with("cannot resolve host name") &&
         !reason.starts_with("TLS") && !reason.starts_with("cannot load") &&
         !reason.starts_with("the server's TLS");
}

// The times a POST carrying an Idempotency-Key is sent at most, when no
// reply comes back or the server answers 502/503/504 (a follower that
// could not reach the leader, a proxy): the key makes the repeat safe, the
// server answers it from its record.
constexpr int kPostAttempts = 3;
constexpr std::chrono::milliseconds kFirstBackoff{250};

// Sends `request`; on success returns the parsed JSON reply (null for an
// empty body). On failure writes the error to `err` and returns its exit code.
Exchange SendOnce(Transport& transport, const Request& request,
                  const Settings& settings, std::ostream& err) {
  const bool retry =
      request.method == "POST" && HasHeader(request, "Idempotency-Key");
  StatusOr<HttpResponse> response = transport.Send(request);
  std::chrono::milliseconds backoff = kFirstBackoff;
  for (int attempt = 1; retry && attempt < kPostAttempts; ++attempt) {
    std::string why;
    if (!response.ok()) {
      if (!MayHaveReachedTheServer(response.status().message())) break;
      why = response.status().message();
    } else if (response->status == 502 || response->status == 503 ||
               response->status == 504) {
      why = "HTTP " + std::to_string(response->status);
    } else {
      break;
    }
    err << "hfctl: " << request.method << " " << request.path << ": " << why
        << "; sending it again with the same Idempotency-Key (the server "
           "does it only once)\n";
    std::this_thread::sleep_for(backoff);
    backoff *= 2;
    response = transport.Send(request);
  }
  if (!response.ok()) {
    err << FormatUnreachable(settings, response.status().message());
    return {std::nullopt, kExitLocalError};
  }
  if (response->status < 200 || response->status >= 300) {
    err << FormatHttpError(response->status, response->body, settings);
    return {std::nullopt, kExitServerError};
  }
  if (response->body.find_first_not_of(" \t\r\n") == std::string::npos) {
    return {Json(nullptr), kExitOk};
  }
  Json reply = Json::parse(response->body, nullptr, /*allow_exceptions=*/false);
  if (reply.is_discarded()) {
    err << "hfctl: the server's reply (HTTP " << response->status
        << ") is not JSON; is " << settings.server.ToString()
        << " an hf-server?\n";
    return {std::nullopt, kExitServerError};
  }
  return {std::move(reply), kExitOk};
}

// The next page's cursor of a list reply; nullopt on the last page.
std::optional<std::string> NextCursor(const Json& reply) {
  if (!reply.is_object()) return std::nullopt;
  const auto it = reply.find("next_cursor");
  if (it == reply.end() || !it->is_string() || it->empty()) return std::nullopt;
  return it->get<std::string>();
}

// Fetches every page of a list, starting from `request`, into one reply
// {"items": [...all...], "next_cursor": null, "resume_cursor": <the last
// page's>}.
Exchange FetchAllPages(Transport& transport, Request request,
                       const Settings& settings, std::ostream& err) {
  Json items = Json::array();
  Json resume = nullptr;  // the last page's resume_cursor
  std::set<std::string> seen_cursors;
  while (true) {
    Exchange page = SendOnce(transport, request, settings, err);
    if (!page.reply) return page;
    const Json& reply = *page.reply;
    if (!reply.is_object() || !reply.contains("items") ||
        !reply["items"].is_array()) {
      err << "hfctl: the server's reply is not a list (no \"items\")\n";
      return {std::nullopt, kExitServerError};
    }
    for (const Json& item : reply["items"]) items.push_back(item);
    if (reply.contains("resume_cursor")) resume = reply["resume_cursor"];
    const std::optional<std::string> cursor = NextCursor(reply);
    if (!cursor) break;
    if (!seen_cursors.insert(*cursor).second) {
      // A cursor seen before would loop forever.
      err << "hfctl: the server returned the cursor \"" << *cursor
          << "\" twice; stopping\n";
      return {std::nullopt, kExitServerError};
    }
    request.SetQuery("cursor", *cursor);
  }
  Json merged = Json::object();
  merged["items"] = std::move(items);
  merged["next_cursor"] = nullptr;
  if (!resume.is_null()) merged["resume_cursor"] = std::move(resume);
  return {std::move(merged), kExitOk};
}

// --follow: shows every page from `request` on, then polls for entries
// after the last one shown (the reply's resume_cursor) every `interval_s`
// seconds, forever; returns only when a request fails (its exit code).
int FollowList(const Action& action, Transport& transport, Request request,
               const Settings& settings, bool json_output, std::ostream& out,
               std::ostream& err) {
  const auto interval =
      std::chrono::duration<double>(*action.follow_interval_s);
  while (true) {
    Exchange page = SendOnce(transport, request, settings, err);
    if (!page.reply) return page.exit_code;
    const Json& reply = *page.reply;
    if (!reply.is_object() || !reply.contains("items") ||
        !reply["items"].is_array() || !reply.contains("resume_cursor") ||
        !reply["resume_cursor"].is_string()) {
      err << "hfctl: the server's reply is not a list with a resume_cursor; "
             "--follow needs a newer hf-server\n";
      return kExitServerError;
    }
    const Json& items = reply["items"];
    if (!items.empty()) {
      if (json_output) {
        for (const Json& item : items) {
          out << item.dump(-1, ' ', /*ensure_ascii=*/false,
                           Json::error_handler_t::replace)
              << '\n';
        }
      } else {
        RenderTable(*action.list_of, items, out);
      }
      out.flush();
    }
    const std::optional<std::string> next = NextCursor(reply);
    request.SetQuery("cursor",
                     next ? *next : reply["resume_cursor"].get<std::string>());
    if (!next) std::this_thread::sleep_for(interval);
  }
}

void ShowList(const Action& action, const Json& reply, std::ostream& out,
              std::ostream& err) {
  Json items = Json::array();
  if (reply.is_array()) {
    items = reply;
  } else if (reply.is_object() && reply.contains("items")) {
    items = reply["items"];
  }
  if (items.empty()) {
    err << "No " << action.noun << " found.\n";
  } else {
    RenderTable(*action.list_of, items, out);
    err << EnforcementWarnings(*action.list_of, items);
  }
  if (const std::optional<std::string> cursor = NextCursor(reply)) {
    err << "hfctl: more " << action.noun << " follow; add --cursor " << *cursor
        << " for the next page, or --all for every page\n";
  }
}

// After a parse that found no command where one was required: which word it
// did not know, or that none was given, with the names it knows ("unknown
// command 'lst' for 'hfctl tasks'; one of: create, list, ..."); nullopt
// where the missing piece is not a command.
std::optional<std::string> UnknownCommand(const CLI::App& app) {
  // The deepest command the words named.
  const CLI::App* at = &app;
  std::string path = app.get_name();
  const auto parsed = [](const CLI::App* sub) { return sub->parsed(); };
  for (std::vector<const CLI::App*> named = at->get_subcommands(parsed);
       !named.empty(); named = at->get_subcommands(parsed)) {
    at = named.back();
    path += " " + at->get_name();
  }
  std::string names;
  for (const CLI::App* sub : at->get_subcommands({})) {
    names += (names.empty() ? "" : ", ") + sub->get_name();
  }
  if (names.empty()) return std::nullopt;
  // An unknown word after a group may have been handed back to its parent.
  std::vector<std::string> rest = at->remaining();
  if (rest.empty()) rest = app.remaining(/*recurse=*/true);
  const std::string one_of = "one of: " + names + " (see " + path + " --help)";
  if (rest.empty()) return "'" + path + "' needs a command, " + one_of;
  return "unknown command '" + rest.front() + "' for '" + path + "'; " + one_of;
}

}  // namespace

int Run(const std::vector<std::string>& args,
        const TransportFactory& make_transport, std::ostream& out,
        std::ostream& err) {
  CommandLine command_line;
  // CLI11 consumes a vector from the back.
  std::vector<std::string> reversed(args.rbegin(), args.rend());
  try {
    command_line.app().parse(reversed);
  } catch (const CLI::RequiredError& e) {
    // "hfctl tsks list" or "hfctl tasks lst": CLI11 says a subcommand is
    // required; the operator needs to hear which word it did not know.
    if (std::optional<std::string> unknown = UnknownCommand(command_line.app());
        unknown.has_value()) {
      err << "hfctl: " << *unknown << '\n';
      return kExitLocalError;
    }
    return command_line.app().exit(e, out, err) == 0 ? kExitOk
                                                     : kExitLocalError;
  } catch (const CLI::ParseError& e) {
    // --help and --version end here too, with exit code 0.
    const int code = command_line.app().exit(e, out, err);
    return code == 0 ? kExitOk : kExitLocalError;
  }
  if (!command_line.action()) {  // unreachable: every group needs a leaf
    err << "hfctl: no command given; see hfctl --help\n";
    return kExitLocalError;
  }
  const Action& action = *command_line.action();

  StatusOr<Request> request = action.build();
  if (!request.ok()) {
    err << "hfctl: " << request.status().message() << '\n';
    return kExitLocalError;
  }
  // Every POST may be sent more than once (SendOnce): the server does it
  // once per key.
  if (request->method == "POST" && !HasHeader(*request, "Idempotency-Key")) {
    request->headers.emplace_back("Idempotency-Key", NewIdempotencyKey());
  }
  StatusOr<Settings> settings = ResolveSettings(command_line.connection());
  if (!settings.ok()) {
    err << "hfctl: " << settings.status().message() << '\n';
    return kExitLocalError;
  }

  std::unique_ptr<Transport> transport = make_transport(*settings);
  if (action.follow_new != nullptr && *action.follow_new) {
    return FollowList(action, *transport, *request, *settings,
                      command_line.json_output(), out, err);
  }
  const bool all_pages = action.follow_all != nullptr && *action.follow_all;
  Exchange exchange = all_pages
                          ? FetchAllPages(*transport, *request, *settings, err)
                          : SendOnce(*transport, *request, *settings, err);
  if (!exchange.reply) return exchange.exit_code;
  const Json& reply = *exchange.reply;

  if (command_line.json_output()) {
    if (!reply.is_null()) {
      out << reply.dump(2, ' ', /*ensure_ascii=*/false,
                        Json::error_handler_t::replace)
          << '\n';
    }
  } else if (action.list_of) {
    ShowList(action, reply, out, err);
  } else {
    action.show(reply, out);
    if (action.notes) action.notes(reply, err);
  }
  return kExitOk;
}

}  // namespace hf::cli
