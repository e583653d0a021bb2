#include "api/advice.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>
#include <tuple>
#include <utility>
#include <vector>

namespace hf::api {

using server::Caller;
using server::ControlPlane;
using server::HookUsage;
using server::SliceTarget;
using store::RowId;

namespace {

// A live slice on one GPU and what its agent last reported of it.
struct Live {
  store::SliceRow row;
  std::optional<HookUsage> usage;

  std::optional<double> interference() const {
    return usage ? usage->report.interference : std::nullopt;
  }
  std::optional<double> share() const {
    return usage ? usage->report.share_achieved_percent : std::nullopt;
  }
  std::int64_t samples() const {
    return usage ? usage->report.interference_samples : 0;
  }
};

using GpuAt = std::pair<RowId, int>;  // (node row id, GPU index)

std::string Fixed(double value, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, value);
  return buf;
}

std::string Where(const std::string& node, int index) {
  return "GPU " + std::to_string(index) + " of node " + node;
}

// "slice 7 (task 12)", "slice 7 (task 12, tenant t1)" with a tenant, or
// "slice 7" for an operator's reservation.
std::string Named(const store::SliceRow& s, const std::string& tenant = "") {
  std::string out = "slice " + std::to_string(s.id);
  std::string about;
  if (s.task_id) about = "task " + std::to_string(*s.task_id);
  if (!tenant.empty()) {
    if (!about.empty()) about += ", ";
    about += "tenant " + tenant;
  }
  if (!about.empty()) out += " (" + about + ")";
  return out;
}

// "holds no slice", "holds 1 slice, not slowed down", "holds 3 slices,
// none slowed down".
std::string Holds(int slices) {
  if (slices == 0) return "holds no slice";
  if (slices == 1) return "holds 1 slice, not slowed down";
  return "holds " + std::to_string(slices) + " slices, none slowed down";
}

// "runs 1.42x slower when it shares GPU 0 of node n1 (310 samples)".
std::string Suffers(const Live& s, const std::string& where) {
  return "runs " + Fixed(*s.interference(), 2) + "x slower when it shares " +
         where + " than alone (" + std::to_string(s.samples()) + " samples)";
}

json Place(const std::string& node, int index) {
  return {{"node_id", node}, {"gpu_index", index}};
}

json SliceItem(ControlPlane& cp, const Live& s) {
  json j;
  j["slice_id"] = s.row.id;
  j["task_id"] = s.row.task_id ? json(*s.row.task_id) : json(nullptr);
  j["tenant"] = cp.TenantName(s.row.tenant_id);
  j["qos"] = s.row.qos_level;
  j["compute_percent"] = s.row.compute_percent;
  j["memory_mb"] = s.row.memory_mib;
  j["share_achieved_percent"] = s.share() ? json(*s.share()) : json(nullptr);
  j["interference"] =
      s.interference() ? json(*s.interference()) : json(nullptr);
  j["interference_samples"] = s.samples();
  j["reported_at"] =
      s.usage ? json(FormatTime(s.usage->reported_at)) : json(nullptr);
  return j;
}

json Advice(const std::string& action, const store::SliceRow* slice, json to,
            std::string reason) {
  json j;
  j["action"] = action;
  j["slice_id"] = slice != nullptr ? json(slice->id) : json(nullptr);
  j["task_id"] = slice != nullptr && slice->task_id ? json(*slice->task_id)
                                                    : json(nullptr);
  j["to"] = std::move(to);
  j["reason"] = std::move(reason);
  return j;
}

// The target a piece of advice names when several would do: the GPU with
// the fewest slices (the least to share with), then the lowest index, then
// the node name, so the same cluster always gets the same advice.
const SliceTarget* Preferred(const std::vector<const SliceTarget*>& targets) {
  const SliceTarget* best = nullptr;
  for (const SliceTarget* t : targets) {
    if (best == nullptr ||
        std::tie(t->slices, t->gpu_index, t->node) <
            std::tie(best->slices, best->gpu_index, best->node)) {
      best = t;
    }
  }
  return best;
}

}  // namespace

StatusOr<double> ParseAdviceThreshold(const std::optional<std::string>& text) {
  if (!text || text->empty()) return kDefaultAdviceThreshold;
  double value = 0;
  const char* begin = text->data();
  const char* end = begin + text->size();
  auto [ptr, ec] = std::from_chars(begin, end, value);
  // from_chars takes "inf" and "nan"; neither is a slowdown.
  if (ec != std::errc() || ptr != end || !std::isfinite(value) ||
      value <= 1.0 || value > 100.0) {
    return Status::InvalidArgument(
        "must be a number above 1 and at most 100 (1.3: 30% slower shared "
        "than alone), got '" +
            ValidUtf8(text->substr(0, 64)) + "'",
        "threshold");
  }
  return value;
}

StatusOr<json> AdviceJson(ControlPlane& cp, const Caller& caller,
                          const AdviceQuery& query) {
  // The route admits only these two; checked again here, as the control
  // plane does for its own methods.
  if (!caller.admin() && caller.role != store::Role::kTenantAdmin) {
    return Status::PermissionDenied(
        "advice needs an admin or tenant-admin token");
  }
  const double threshold = query.threshold;
  // A tenant-admin's own tenant; none for an admin (every tenant is its).
  std::optional<RowId> own;
  if (!caller.admin()) {
    if (!caller.tenant_id) {
      return json{{"threshold", threshold}, {"items", json::array()}};
    }
    own = *caller.tenant_id;
  }
  const auto visible = [&](const Live& s) {
    return !own || s.row.tenant_id == *own;
  };

  std::optional<RowId> node_filter;
  std::vector<store::SliceRow> rows;
  std::map<GpuAt, std::string> models;
  HF_RETURN_IF_ERROR(cp.store()->Read([&](store::Txn& txn) -> Status {
    rows.clear();
    models.clear();
    if (query.node) {
      auto n = txn.FindNode(*query.node);
      if (!n.ok()) {
        if (n.status().code() != StatusCode::kNotFound) return n.status();
        return Status::InvalidArgument(
            "no node '" + ValidUtf8(query.node->substr(0, 64)) + "'",
            "node_id");
      }
      node_filter = n->id;
    }
    store::SliceFilter f;
    f.live_only = true;
    f.limit = 1000;
    for (;;) {
      auto page = txn.ListSlices(f);
      if (!page.ok()) return page.status();
      for (store::SliceRow& s : *page) rows.push_back(std::move(s));
      if (static_cast<int>(page->size()) < f.limit) break;
      f.after_id = rows.back().id;
    }
    auto gpus = txn.ListGpus(std::nullopt);
    if (!gpus.ok()) return gpus.status();
    for (const store::GpuRow& g : *gpus) models[{g.node_id, g.index}] = g.model;
    return Status::Ok();
  }));

  // Slices on one GPU, by GPU; whole GPUs share with nobody.
  std::map<GpuAt, std::vector<Live>> by_gpu;
  for (store::SliceRow& s : rows) {
    if (s.whole || s.gpu_indices.size() != 1) continue;
    Live live;
    if (s.task_id) live.usage = cp.SliceHookUsage(s.id);
    const GpuAt at{s.node_id, s.gpu_indices[0]};
    live.row = std::move(s);
    by_gpu[at].push_back(std::move(live));
  }
  const auto suffers = [&](const Live& s) {
    return s.row.state == store::SliceState::kAllocated && s.interference() &&
           *s.interference() >= threshold;
  };
  // GPUs no slice should be moved to: one there suffers already (whoever's
  // it is; the caller learns only that the GPU is not recommended).
  std::set<std::pair<std::string, int>> crowded;
  for (const auto& [at, slices] : by_gpu) {
    if (std::any_of(slices.begin(), slices.end(), suffers)) {
      crowded.insert({cp.NodeName(at.first), at.second});
    }
  }

  // Where each suffering slice would be admitted now, in one pass.
  std::vector<RowId> asked;
  for (const auto& [at, slices] : by_gpu) {
    if (node_filter && at.first != *node_filter) continue;
    for (const Live& s : slices) {
      if (visible(s) && suffers(s) && s.row.qos_level != "gold") {
        asked.push_back(s.row.id);
      }
    }
  }
  auto targets_of = cp.SliceTargets(asked);
  if (!targets_of.ok()) return targets_of.status();

  // NOLINTNEXTLINE(bugprone-exception-escape): json() does not throw
  struct Item {
    double max = 0;
    std::string node;
    int index = 0;
    json body;
  };
  std::vector<Item> items;
  for (const auto& [at, slices] : by_gpu) {
    if (node_filter && at.first != *node_filter) continue;
    std::vector<const Live*> mine;  // the visible suffering slices
    for (const Live& s : slices) {
      if (visible(s) && suffers(s)) mine.push_back(&s);
    }
    if (mine.empty()) continue;
    std::stable_sort(mine.begin(), mine.end(),
                     [](const Live* a, const Live* b) {
                       return *a->interference() > *b->interference();
                     });
    Item item;
    item.node = cp.NodeName(at.first);
    item.index = at.second;
    item.max = *mine.front()->interference();
    const std::string where = Where(item.node, item.index);

    json listed = json::array();
    int others = 0;
    int others_compute = 0;
    for (const Live& s : slices) {
      if (visible(s)) {
        listed.push_back(SliceItem(cp, s));
      } else {
        ++others;
        others_compute += s.row.compute_percent;
      }
    }

    json advice = json::array();
    for (const Live* s : mine) {
      if (s->row.qos_level == "gold") continue;  // a partition already
      auto targets = targets_of->find(s->row.id);
      if (targets == targets_of->end()) continue;  // no longer live
      std::vector<const SliceTarget*> moves;
      std::vector<const SliceTarget*> golds;
      for (const SliceTarget& t : targets->second) {
        if (!t.mig_profile.empty()) {
          golds.push_back(&t);  // a partition is not shared: never crowded
        } else if (!crowded.contains({t.node, t.gpu_index})) {
          moves.push_back(&t);
        }
      }
      const std::string fits = std::to_string(s->row.memory_mib) + " MB and " +
                               std::to_string(s->row.compute_percent) +
                               "% compute";
      if (const SliceTarget* t = Preferred(moves)) {
        bool can_plan = false;
        if (s->row.task_id) {
          auto task = cp.store()->Read([&](store::Txn& txn) -> Status {
            auto row = txn.GetTask(*s->row.task_id);
            if (!row.ok()) return row.status();
            can_plan = row->preemptible;
            return Status::Ok();
          });
          if (!task.ok() && task.code() != StatusCode::kNotFound) return task;
        }
        std::string reason = Named(s->row) + " " + Suffers(*s, where) + "; " +
                             Where(t->node, t->gpu_index) +
                             " has room for its " + fits + " now and " +
                             Holds(t->slices) + ": move it there";
        reason += can_plan
                      ? " (its task is preemptible: a defragmentation plan, "
                        "POST /api/v1/defrag/plans, can move it)"
                      : " (its task is not preemptible, so the "
                        "defragmentation planner will not move it: it needs "
                        "a restart of the task)";
        advice.push_back(Advice("move", &s->row, Place(t->node, t->gpu_index),
                                std::move(reason)));
      }
      if (const SliceTarget* t = Preferred(golds)) {
        advice.push_back(Advice(
            "gold", &s->row, Place(t->node, t->gpu_index),
            Named(s->row) + " " + Suffers(*s, where) + "; " +
                Where(t->node, t->gpu_index) +
                " is in MIG mode and has room for its " + fits + " as a " +
                t->mig_profile +
                " partition: give it gold (a MIG partition), whose compute "
                "and memory no other slice shares"));
      }
    }

    // One neighbour per GPU: the running slice (not suffering itself) that
    // takes the most of the GPU's time as measured, else the largest
    // compute share when none is measured. Ties: the lower slice id.
    const Live* worst = mine.front();
    const auto candidate = [&](const Live& s) {
      return !suffers(s) && s.row.task_id.has_value() &&
             s.row.state == store::SliceState::kAllocated;
    };
    const bool measured = std::any_of(
        slices.begin(), slices.end(),
        [&](const Live& s) { return candidate(s) && s.share().has_value(); });
    const auto weight = [&](const Live& s) -> double {
      return measured ? *s.share() : s.row.compute_percent;
    };
    const Live* neighbour = nullptr;
    for (const Live& s : slices) {  // ascending id: the first of a tie wins
      if (!candidate(s) || (measured && !s.share())) continue;
      if (neighbour == nullptr || weight(s) > weight(*neighbour)) {
        neighbour = &s;
      }
    }
    if (neighbour != nullptr) {
      const std::string victim =
          Named(worst->row) + " " + Suffers(*worst, where);
      if (visible(*neighbour)) {
        const std::string name = "slice " + std::to_string(neighbour->row.id);
        const std::string uses =
            measured
                ? "used " + Fixed(*neighbour->share(), 1) +
                      "% of the GPU's time against its " +
                      std::to_string(neighbour->row.compute_percent) + "% share"
                : "holds a " + std::to_string(neighbour->row.compute_percent) +
                      "% compute share, the largest of the slices beside it";
        std::string reason =
            Named(neighbour->row, cp.TenantName(neighbour->row.tenant_id));
        reason += " ";
        reason += uses;
        reason += " while ";
        reason += victim;
        reason += ": lower ";
        reason += name;
        reason += "'s compute share (gpu_compute_ratio) so that slice ";
        reason += std::to_string(worst->row.id);
        reason += " gets more of the GPU";
        advice.push_back(
            Advice("lower_share", &neighbour->row, nullptr, std::move(reason)));
      } else {
        // Another tenant's slice: neither its ids nor its numbers.
        advice.push_back(Advice(
            "lower_share", nullptr, nullptr,
            "a slice of another tenant takes the most of this GPU's time "
            "while " +
                victim +
                ": ask a platform admin to lower that slice's compute "
                "share"));
      }
    }

    auto model = models.find(at);
    item.body = {
        {"node_id", item.node},
        {"gpu_index", item.index},
        {"gpu_model",
         model == models.end() ? json(nullptr) : json(model->second)},
        {"interference_max", item.max},
        {"slices", std::move(listed)},
        {"others", {{"slices", others}, {"compute_percent", others_compute}}},
        {"advice", std::move(advice)}};
    items.push_back(std::move(item));
  }
  std::sort(items.begin(), items.end(), [](const Item& a, const Item& b) {
    if (a.max != b.max) return a.max > b.max;
    return std::tie(a.node, a.index) < std::tie(b.node, b.index);
  });
  json out = json::array();
  for (Item& item : items) out.push_back(std::move(item.body));
  return json{{"threshold", threshold}, {"items", std::move(out)}};
}

}  // namespace hf::api
