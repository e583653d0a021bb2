#include "runtime/sim_runtime.h"

#include <algorithm>
#include <csignal>
#include <utility>

namespace hf::runtime {

SimHost::SimHost(gpu::SimGpuDriver* driver, const Clock* clock,
                 Behaviour behaviour)
    : driver_(driver), clock_(clock), behaviour_(std::move(behaviour)) {}

void SimHost::End(SimTaskProcess& task, TaskStatus status) {
  if (!task.running()) return;
  task.status = std::move(status);
  task.ended_at = clock_->NowMillis();
  for (std::int64_t pid : task.pids) (void)driver_->UnregisterProcess(pid);
  task.pids.clear();
  task.log += "ended: " + DescribeTaskStatus(task.status) + "\n";
}

void SimHost::Tick() {
  const std::int64_t now = clock_->NowMillis();
  for (auto& [id, task] : tasks_) {
    if (task.running() && now >= task.ends_at) {
      End(task, TaskStatus{TaskState::kExited, task.exit_code, 0, false, ""});
    }
  }
}

void SimHost::PowerOff() {
  for (auto& [id, task] : tasks_) {
    End(task,
        TaskStatus{TaskState::kLost, 0, 0, false, "the machine lost power"});
  }
}

void SimHost::FailGpu(int index) {
  for (auto& [id, task] : tasks_) {
    if (std::find(task.gpu_indices.begin(), task.gpu_indices.end(), index) ==
        task.gpu_indices.end()) {
      continue;
    }
    End(task, TaskStatus{TaskState::kExited, 1, 0, false,
                         "GPU " + std::to_string(index) + " fell off the bus"});
  }
}

Status SimRuntime::Start(const TaskSpec& spec) {
  HF_RETURN_IF_ERROR(ValidateTaskSpec(spec, EnvTarget::kHostProcess));
  host_->Tick();
  if (host_->tasks_.contains(spec.task_id)) {
    return Status::AlreadyExists("task " + std::to_string(spec.task_id) +
                                 " is held by the runtime");
  }
  const SimTaskBehaviour behaviour = host_->behaviour_(spec);
  const std::int64_t now = host_->clock_->NowMillis();
  SimTaskProcess task;
  task.task_id = spec.task_id;
  task.spec = spec;
  task.started_at = now;
  task.ends_at = now + std::max<std::int64_t>(behaviour.duration_ms, 1);
  task.exit_code = behaviour.exit_code;
  task.mig_device = spec.mig_device;

  // Where it really runs: the MIG device's card, or the pinned cards (an
  // unpinned CUDA program uses device 0).
  std::optional<int> gpu_instance;
  std::string fail;
  if (!spec.mig_device.empty()) {
    for (const auto& [index, devices] : host_->driver_->AllMigDevices()) {
      for (const gpu::MigDevice& d : devices) {
        if (d.device_uuid == spec.mig_device) {
          task.gpu_indices = {index};
          gpu_instance = d.gpu_instance_id;
        }
      }
    }
    if (!gpu_instance) fail = "no MIG device " + spec.mig_device;
  } else {
    task.gpu_indices = spec.gpu_indices;
    if (task.gpu_indices.empty()) task.gpu_indices = {0};
  }
  const gpu::Inventory& inventory = host_->driver_->inventory();
  for (int index : task.gpu_indices) {
    if (!fail.empty()) break;
    if (index < 0 || index >= static_cast<int>(inventory.gpus.size())) {
      fail = "no GPU " + std::to_string(index);
      break;
    }
    std::int64_t memory = behaviour.memory_mib;
    if (memory <= 0) memory = inventory.gpus[index].memory_mib;
    task.memory_mib = memory;
    const std::int64_t pid = host_->next_pid_++;
    const Status registered = host_->driver_->RegisterProcess(
        gpu::SimProcess{pid, index, gpu_instance, memory});
    if (!registered.ok()) {
      fail = registered.message();
      break;
    }
    task.pids.push_back(pid);
  }
  task.log = "started on GPU(s)";
  for (int index : task.gpu_indices) task.log += " " + std::to_string(index);
  task.log += "\n";
  task.log += behaviour.output;
  auto [it, inserted] = host_->tasks_.emplace(spec.task_id, std::move(task));
  if (!fail.empty()) {
    // A CUDA program that cannot reach its device exits at once.
    host_->End(it->second,
               TaskStatus{TaskState::kExited, 1, 0, false, "CUDA: " + fail});
  } else if (host_->on_start_) {
    host_->on_start_(it->second);
  }
  return Status::Ok();
}

StatusOr<TaskStatus> SimRuntime::Poll(std::int64_t task_id) {
  host_->Tick();
  auto it = host_->tasks_.find(task_id);
  if (it == host_->tasks_.end()) {
    return Status::NotFound("no task " + std::to_string(task_id));
  }
  return it->second.status;
}

Status SimRuntime::Kill(std::int64_t task_id, std::chrono::milliseconds) {
  host_->Tick();
  auto it = host_->tasks_.find(task_id);
  if (it == host_->tasks_.end()) {
    return Status::NotFound("no task " + std::to_string(task_id));
  }
  host_->End(it->second,
             TaskStatus{TaskState::kSignaled, 0, SIGTERM, false, ""});
  return Status::Ok();
}

StatusOr<std::vector<AdoptedTask>> SimRuntime::Adopt() {
  host_->Tick();
  std::vector<AdoptedTask> out;
  for (const auto& [id, task] : host_->tasks_) {
    out.push_back(AdoptedTask{id, task.status, TaskLabels(task.spec)});
  }
  return out;
}

Status SimRuntime::Remove(std::int64_t task_id) {
  host_->Tick();
  auto it = host_->tasks_.find(task_id);
  if (it == host_->tasks_.end()) {
    return Status::NotFound("no task " + std::to_string(task_id));
  }
  if (it->second.running()) {
    return Status::FailedPrecondition("task " + std::to_string(task_id) +
                                      " is still running");
  }
  host_->tasks_.erase(it);
  return Status::Ok();
}

StatusOr<LogChunk> SimRuntime::ReadLog(std::int64_t task_id,
                                       std::int64_t offset,
                                       std::size_t max_bytes) {
  auto it = host_->tasks_.find(task_id);
  if (it == host_->tasks_.end()) {
    return Status::NotFound("no task " + std::to_string(task_id));
  }
  const std::string& log = it->second.log;
  LogChunk chunk;
  if (offset < 0) offset = 0;
  if (static_cast<std::size_t>(offset) < log.size()) {
    chunk.data = log.substr(static_cast<std::size_t>(offset), max_bytes);
  }
  chunk.next_offset = offset + static_cast<std::int64_t>(chunk.data.size());
  return chunk;
}

}  // namespace hf::runtime
