"""The holes the whole-system simulation guards against, as mutations.

Each entry puts one hole back into the source (an exact text replacement:
it fails loudly once the code has moved on) and names what must catch it:
  "simulation": the random seeds of `make test` (simulation_test's
               RandomSeedsUnderFaultsKeepEveryInvariant budget), and
  "test": a gtest filter over simulation_test, control_plane_test or
          agent_test (filters starting "AgentTest."), or "TARGET/FILTER"
          for the test binary TARGET.
scripts/mutations.py applies each in a scratch worktree, builds, runs
the checks and reports whether, and after how many steps, it was caught.
"""

MUTATIONS = [
    dict(
        name="cancel-releases-scheduled",
        hole="1: a cancel while `scheduled` releases the slice at once",
        file="src/server/tasks.cc",
        old="""          case TaskState::kScheduled:
          case TaskState::kRunning:""",
        new="""          case TaskState::kRunning:""",
        old2="""          case TaskState::kPending:
            // Bound nowhere: nothing runs it.""",
        new2="""          case TaskState::kScheduled:
          case TaskState::kPending:
            // Bound nowhere: nothing runs it.""",
        tests=["ScenarioTest.CancelOfAScheduledTask*"],
        simulation=True,
    ),
    dict(
        name="delete-requeues-at-once",
        hole="2: an admin DELETE of a scheduled task's slice requeues it at once",
        file="src/server/operator_slices.cc",
        old="""        if (task && task->state == store::TaskState::kScheduled) {
          // Bound to a node that may have started it already""",
        new="""        if (task && task->state == store::TaskState::kScheduled) {
          HF_RETURN_IF_ERROR(releases_->ReleaseInTxn(txn, out, caller.Actor(),
                                                     why, released));
          store::TaskRow t = *task;
          t.state = store::TaskState::kPending;
          t.slice_id.reset();
          t.node_id.reset();
          t.gpu_indices.clear();
          StripSliceEnv(t.env);
          return txn.UpdateTask(t).status();
        }
        if (false) {
          // Bound to a node that may have started it already""",
        tests=["ScenarioTest.DeletingAScheduledTasksSlice*"],
        simulation=True,
    ),
    dict(
        name="recovery-checks-tenancy",
        hole="3 (found): recovery refuses slices whose tenancy changed since",
        file="src/server/recovery.cc",
        old="""          ledger::Ledger::RestoreOptions{.check_tenancy = false});
      if (restored_alloc.ok()) {""",
        new="""          ledger::Ledger::RestoreOptions{.check_tenancy = true});
      if (restored_alloc.ok()) {""",
        tests=[],
        simulation=True,
    ),
    dict(
        name="recovery-fails-open",
        hole="3: recovery skips a slice it cannot restore and binds on",
        file="src/server/recovery.cc",
        old="""        HF_RETURN_IF_ERROR(
            FenceUnrestored(slice, restored_alloc.status().message()));""",
        new="""        spdlog::error("recovery: slice {} could not be restored", slice.id);""",
        tests=["ControlPlaneTest.RecoveryThatCannotRestoreASliceFencesItsGpu",
               "recovery_test/RecoveryTest.ASliceTheLedgerCannotTakeBackFencesItsGpu"],
        simulation=False,
    ),
    dict(
        name="mig-create-twice",
        hole="4: the agent keeps the claimed command, not its outcome",
        file="src/agent/agent.cc",
        old="""  // Carried out already: only the report is left.
  if (!pending.outcome.is_null()) return report(pending.outcome);""",
        new="""  pending.outcome = nullptr;
  pending.executing = false;""",
        tests=["ScenarioTest.ALostReplyToAMigCreateReport*"],
        simulation=True,
    ),
    dict(
        name="mig-crash-recreates",
        hole="4: an agent that died inside a create makes a second partition",
        file="src/agent/agent.cc",
        old="""  if (pending.executing && listed.ok()) {""",
        new="""  if (false) {""",
        tests=["ScenarioTest.AnAgentThatDiedInsideAMigCreate*"],
        simulation=False,
    ),
    dict(
        name="late-create-kept",
        hole="5: a stuck create releases its slice; a late success is kept, never destroyed",
        file="src/server/mig_channel.cc",
        old="""          if (s.state == store::SliceState::kAllocated) {
            s.state = store::SliceState::kReleasing;
            HF_RETURN_IF_ERROR(txn.UpdateSlice(s));
          }
          store::SliceRequestRow destroy =""",
        new="""          if (s.state == store::SliceState::kAllocated) {
            s.state = store::SliceState::kReleased;
            s.released_at = now;
            HF_RETURN_IF_ERROR(txn.UpdateSlice(s));
            released.push_back(s.id);
          }
          if (s.state == store::SliceState::kReleased) continue;
          store::SliceRequestRow destroy =""",
        file2="src/server/mig_channel.cc",
        old2="""          (late || s.state != store::SliceState::kAllocated)) {""",
        new2="""          s.state == store::SliceState::kReleasing) {""",
        tests=["ScenarioTest.AStuckMigCreate*"],
        simulation=True,
    ),
    dict(
        name="stuck-create-waits",
        hole="6: a gold task whose create is stuck waits `scheduled` for ever",
        file="src/server/mig_channel.cc",
        old="""      if (row.action != "create") continue;  // a destroy is offered again""",
        new="""      continue;""",
        tests=["ScenarioTest.AStuckMigCreate*", "ControlPlaneTest.StuckMigCommandsAreMarked"],
        simulation=True,
    ),
    dict(
        # Hole 7 (after 4 MIG misses a good non-MIG placement was released)
        # went with the retry loop it lived in: MIG GPUs that take no new
        # partition are now a filter of the placement pipeline.
        name="mig-geometry-ignored",
        hole="16: partitions were counted, not placed: two charged to the same memory slots",
        file="src/ledger/cluster_view.cc",
        old="""                             request.compute_percent, existing,""",
        new="""                             request.compute_percent, {},""",
        tests=["ledger_test/LedgerTest.MigSlice*",
               "ControlPlaneTest.GoldSlicesAreChargedAndCreated*"],
        simulation=False,
    ),
    dict(
        name="policy-error-fails-task",
        hole="8: a policy/ledger disagreement fails the task for good",
        file="src/server/scheduler.cc",
        old="""    } else if (result.outcome == ledger::PlacementOutcome::kInvalid &&
               result.status.code() == StatusCode::kInvalidArgument) {""",
        new="""    } else if (result.outcome == ledger::PlacementOutcome::kInvalid) {""",
        tests=["ControlPlaneTest.APolicyTheLedgerRefuses*"],
        simulation=False,
    ),
    dict(
        name="scan-one-page",
        hole="9: scans stop after the first page",
        file="src/server/internal.h",
        old="""    for (Row& row : *rows) HF_RETURN_IF_ERROR(fn(row));
    if (static_cast<int>(rows->size()) < f.limit) return Status::Ok();""",
        new="""    for (Row& row : *rows) HF_RETURN_IF_ERROR(fn(row));
    return Status::Ok();""",
        tests=["ForEachRowTest.*"],
        simulation=False,
    ),
    dict(
        name="gc-counts-candidates",
        hole="9: GC counts the slices it meant to release",
        file="src/server/gc.cc",
        old="""  return *released;""",
        new="""  return static_cast<int>(candidates.size());""",
        tests=["ControlPlaneTest.GcCountsOnlyWhatItReallyReleased"],
        simulation=False,
    ),
    dict(
        name="claims-not-reoffered",
        hole="15: a claimed create whose agent never heard of it is not offered again",
        file="src/server/mig_channel.cc",
        old="""         {store::SliceRequestState::kClaimed, store::SliceRequestState::kStuck,
          store::SliceRequestState::kPending}) {""",
        new="""         {store::SliceRequestState::kPending}) {""",
        tests=["ScenarioTest.AClaimWhoseReplyWasLost*"],
        simulation=False,
    ),
    dict(
        name="orphans-do-not-block",
        hole="16: partitions nobody owns still take gold placements",
        file="src/server/placement.cc",
        old="""    for (const auto& [gpu, why] : Blocked()) {""",
        new="""    for (const auto& [gpu, why] : std::map<GpuId, std::string>{}) {""",
        tests=["ScenarioTest.APartitionNobodyOwns*",
               "ControlPlaneTest.ManyFullMigGpusDoNotStarve*"],
        simulation=False,
    ),
    dict(
        name="orphan-notes-in-memory",
        hole="17: orphan notes live in memory only; every restart notes them again",
        file="src/server/mig_book.cc",
        old="""  if (text.empty()) return;""",
        new="""  return;""",
        tests=["ScenarioTest.AnOrphanIsNotedOnce*"],
        # The random runs check that an orphan is noted within a bounded
        # time, not that it is noted only once: its scenario test does.
        simulation=False,
    ),
    dict(
        name="node-resources-shifted",
        hole="found: node CPU/memory << 20 overflows the placement index",
        file="src/server/inventory.cc",
        old="""  spec.cpu_milli = ledger::kMaxNodeCpuMilli;
  spec.host_memory_mib = ledger::kMaxNodeHostMemoryMib;""",
        new="""  spec.cpu_milli = std::min<std::int64_t>(node.cpu_milli << 20,
                                          ledger::kMaxNodeCpuMilli + 1);
  spec.host_memory_mib = std::min<std::int64_t>(
      node.host_memory_mib << 20, ledger::kMaxNodeHostMemoryMib);""",
        tests=[],
        simulation=True,
    ),
    dict(
        name="stale-report-applied",
        hole="found: a delayed report of an earlier binding ends the new one",
        file="src/server/agent_tasks.cc",
        old="""      if (r.slice_id && task.slice_id != r.slice_id) {
        continue;  // about an earlier binding of the task: stale
      }""",
        new="",
        tests=["ScenarioTest.ADelayedReportOfAnEarlierBinding*"],
        simulation=True,
    ),
    dict(
        name="destroy-on-lost-gpu-gives-up",
        hole="found: a destroy on a lost GPU is reported orphaned; its slice is held for ever",
        file="src/agent/agent.cc",
        old="""    if (action == "destroy") return false;
    return fail(why);""",
        new="""    return fail(why, action == "destroy");""",
        tests=[],
        simulation=True,
    ),
    dict(
        name="mig-charge-nominal",
        hole="found: a partition is chosen by its nominal size and charged less than the task asked",
        file="src/ledger/cluster_view.cc",
        old="""                             request.compute_percent, existing,
                             g.spec.memory_mib);""",
        new="""                             request.compute_percent, existing);""",
        tests=["ScenarioTest.AGoldSliceIsChargedAtLeast*"],
        simulation=True,
    ),
    dict(
        name="no-reconcile",
        hole="kubelet-style sync: tasks the server no longer assigns keep running",
        file="src/agent/agent.cc",
        old="""  if (!reply.contains("bound") || !reply["bound"].is_array()) return;""",
        new="""  return;""",
        tests=["ScenarioTest.ANodeBackFromBeingLost*"],
        simulation=False,
    ),
    dict(
        name="mig-redone-after-done",
        hole="found (agent_test): a MIG command offered again after it was done is carried out again",
        file="src/agent/agent.cc",
        old="""      if (done != done_mig_.end()) pending_mig_[id].outcome = done->second;""",
        new="""      if (false && done != done_mig_.end()) pending_mig_[id].outcome = done->second;""",
        tests=["AgentTest.AMigCreateIsCarriedOutOnce*"],
        simulation=False,
    ),
    dict(
        name="reply-not-an-object",
        hole="found (agent_test): a reply that is JSON but not an object throws in the agent",
        file="src/agent/server_client.cc",
        old="""  if (!parsed.is_object()) {""",
        new="""  if (false) {""",
        tests=["AgentTest.SurvivesAnyReply*"],
        simulation=False,
    ),
    dict(
        name="start-with-unreadable-gpus",
        hole="found (agent_test): an assignment whose gpu_indices cannot be read starts with every GPU visible",
        file="src/agent/agent.cc",
        old="""  if (!indices_ok) {""",
        new="""  if (false) {""",
        tests=["AgentTest.AnAssignmentWithoutGpusOfThisNode*"],
        simulation=False,
    ),
    dict(
        name="create-without-uuid",
        hole="found (agent_test): a MIG create that names no GPU UUID is carried out unchecked",
        file="src/agent/agent.cc",
        old="""  if (want_uuid.empty() && action == "create") {""",
        new="""  if (false) {""",
        tests=["AgentTest.ACreateThatNamesNoCard*"],
        simulation=False,
    ),
    dict(
        name="duplicate-keys-pass",
        hole="14: a body with a duplicate key is accepted (the last one wins)",
        file="src/common/strict_json.cc",
        old="""    if (!comment && !f.keys.insert(f.key).second) {""",
        new="""    if (!comment && !f.keys.insert(f.key).second && false) {""",
        tests=["common_test/StrictJsonTest.DuplicateKeys*"],
        simulation=False,
    ),
    dict(
        name="relative-flag-paths",
        hole="12: a relative path flag is kept relative (the agent then refuses every silver task)",
        file="src/common/flag_paths.cc",
        old="""  value = std::move(normal);""",
        new="""  (void)normal;""",
        tests=["common_test/FlagPathsTest.RelativePathsBecomeAbsolute*"],
        simulation=False,
    ),
    dict(
        name="whole-gpu-shown-silver",
        hole="18: a whole-GPU grant is shown as silver though no MPS limit applies",
        file="src/scheduler/qos.cc",
        old="""    d.level = QosLevel::kExclusive;""",
        new="""    d.level = QosLevel::kSilver;""",
        tests=["qos_test/DeriveQosTest.WholeGpusAreExclusive*"],
        simulation=False,
    ),
    dict(
        name="roles-after-validation",
        hole="13: who may call a route is checked after what they sent (a user's bad body gets 400, not 403)",
        file="src/api/http_api.cc",
        old="""    if (!route.access.roles.Has(ctx.caller.role)) {""",
        new="""    if (false) {""",
        tests=["http_api_test/HttpApiTest.EveryRouteChecksTheRoleBeforeParsing*"],
        simulation=False,
    ),
    dict(
        name="acts-for-after-validation",
        hole="13: a user naming another tenant in a task's body is told which field is wrong (400), not refused (403)",
        file="src/api/routes_tasks.cc",
        old="""      server::CheckActsFor(c.caller, StringField(*body, "tenant")));""",
        new="""      Status::Ok());""",
        tests=["http_api_test/HttpApiTest.WhatARequestActsForIsCheckedBeforeItsBody*"],
        simulation=False,
    ),
    dict(
        name="exit-poll-storm",
        hole="16: an ended task the server cannot hear of yet wakes the agent for a cycle at every exit poll",
        file="src/agent/agent.cc",
        old="""    if (task.finished) continue;  // known; reported by a cycle""",
        new="""    // (every poll asks again)""",
        tests=["agent_e2e_test/AgentE2eTest.ATaskEndingWhileTheServerIsDown*"],
        simulation=False,
    ),
    dict(
        name="idempotency-no-replay",
        hole="10: a POST retried with its Idempotency-Key is not answered with the first reply",
        file="src/api/idempotency.cc",
        old="""  if (found.status != 0) return Outcome::kReplay;""",
        new="""  if (found.status != 0 && false) return Outcome::kReplay;""",
        tests=["http_api_test/HttpApiTest.TaskPostWithAKeyIsDoneOnce*"],
        simulation=False,
    ),
    dict(
        name="nul-in-strings-passes",
        hole="14: a string with a NUL byte (\"a\\u0000b\") is accepted",
        file="src/common/strict_json.cc",
        old="""                                      '\\0') != std::string::npos) {""",
        new="""                                      '\\0') != std::string::npos && false) {""",
        tests=["common_test/StrictJsonTest.KeysAndStringsHoldNoForbidden*"],
        simulation=False,
    ),
    dict(
        name="huge-number-not-named",
        hole="14: a number beyond a double (1e400) is not answered naming its field",
        file="src/common/strict_json.cc",
        old="""  } catch (const json::out_of_range& e) {
    // A number beyond what a double holds: the field being parsed is the
    // one at fault.
    return Status::InvalidArgument("is out of range: " + Reason(e),
                                   walker.Path());
""",
        new="",
        tests=["common_test/StrictJsonTest.NumberOutOfRangeNamesItsPath"],
        simulation=False,
    ),
    dict(
        name="gave-up-then-started",
        hole="found (soak, seed 40215): a task reported failed (the report delayed) is started later under the same binding, and the late report ends it with its process running",
        file="src/agent/agent.cc",
        old="""      if (gave != gave_up_.end() &&
          gave->second.slice_id == IntOr(task, "slice_id", 0)) {""",
        new="""      if (false && gave != gave_up_.end() &&
          gave->second.slice_id == IntOr(task, "slice_id", 0)) {""",
        tests=["AgentTest.ATaskReportedFailedIsNeverStarted*"],
        simulation=False,
    ),
    dict(
        name="late-heartbeat-applied",
        hole="found (soak, seed 40172): a heartbeat delivered late is applied over newer ones, and a destroyed partition it still lists is noted as an orphan again",
        file="src/server/nodes.cc",
        old="""      if (report.number && *report.number <= applied) {""",
        new="""      if (false && report.number && *report.number <= applied) {""",
        tests=["ScenarioTest.AHeartbeatDeliveredLateIsNotApplied*",
               "ControlPlaneTest.AReportOlderThanTheNewestAppliedIsNotApplied",
               "nodes_test/NodesTest.ARegistrationReachesTheStoreThenTheLedgerAndAnOlderOneNot"],
        simulation=False,
    ),
    dict(
        name="defrag-reservation-kept",
        hole="a defragmentation step whose write failed keeps its target reserved in the ledger",
        file="src/server/defrag.cc",
        old="""  if (reservation.allocation && (!written.ok() || !used)) {""",
        new="""  if (false && reservation.allocation && (!written.ok() || !used)) {""",
        tests=["defrag_plans_test/DefragTest.AStepWhoseWriteFailsGivesItsReservationBack"],
        simulation=False,
    ),
    dict(
        name="raise-kept-unwritten",
        hole="a quota raise whose write failed keeps the larger size in the ledger",
        file="src/server/operator_slices.cc",
        old="""    if (memory > old) (void)ledger_->ledger().ResizeSlice(ledger_id, old);""",
        new="""    (void)ledger_id;""",
        tests=["operator_slices_test/OperatorSlicesTest.AResizeHoldsTheLargerSizeWhileItsWriteIsOpen"],
        simulation=False,
    ),
    dict(
        name="compensation-kept-unwritten",
        hole="a compensation whose write failed stays charged in the ledger",
        file="src/server/nodes.cc",
        old="""    lock.Lock();
    (void)ledger_->ledger().Release(restored->id);""",
        new="""    lock.Lock();""",
        tests=["nodes_test/NodesTest.ARunningTaskWithoutASliceIsRecordedLedgerOnlyOnceWritten"],
        simulation=False,
    ),
    dict(
        name="node-scan-mig-at-default-share",
        hole="the node scan demands a defaulted share's 50% free of a GPU in MIG mode, which charges the partition (a 1g is 14%)",
        file="src/scheduler/policy/node_scan.cc",
        old="""          need.ComputeFloor(node.mig_slices) > node.max_free_compute_percent) {""",
        new="""          need.compute > node.max_free_compute_percent) {""",
        old2="""                          need.ComputeFloor(gpu.mig != nullptr) &&""",
        new2="""                          need.compute &&""",
        tests=["ControlPlaneTest.HfFragBindsADefaultedShareOnAMigGpuWithLessThanHalfLeft",
               "agent_e2e_test/AgentE2eTest.AfterAServerCrashTheLearnedPolicyBindsAShareOnAFullMigGpu"],
        simulation=False,
    ),
    dict(
        name="hold-not-applied",
        hole="16: the GPUs held for tasks that waited long still take newer tasks, so a large task starves behind a stream of small ones",
        file="src/scheduler/hold.cc",
        old="""    if (hold.task_id == task_id) continue;""",
        new="""    if (hold.task_id == task_id || task_id >= 0) continue;""",
        tests=["hold_test/HoldBookTest.*",
               "replay_test/ReplayTest.AHoldDrainsTheGpuForTheTaskThatWaitedLongest",
               "control_plane_test/HoldTest.*",
               "agent_e2e_test/HoldE2eTest.*",
               "agent_e2e_test/MaxHoldsE2eTest.*"],
        simulation=False,
    ),
    dict(
        name="max-holds-ignored",
        hole="16: with --max-holds above 1 still only one waiting task at a time has GPUs held, so large tasks wait their turn for a hold",
        file="src/scheduler/hold.cc",
        old="""         static_cast<int>(holds_.size()) < rules.max_holds &&""",
        new="""         holds_.empty() &&""",
        tests=["hold_test/HoldBookTest.*",
               "control_plane_test/HoldTest.*",
               "agent_e2e_test/MaxHoldsE2eTest.*"],
        simulation=False,
    ),
    dict(
        name="hold-on-a-cpu-starved-node",
        hole="16: a hold takes an empty GPU on a node whose CPU other tasks hold; it drains at once, the task still does not fit, and it never gets another hold",
        file="src/scheduler/hold.cc",
        old="""  return request.cpu_milli > node.free_cpu_milli() ||""",
        new="""  return (false && request.cpu_milli > node.free_cpu_milli()) ||""",
        tests=["hold_test/ChooseHoldTest.AGpuOnANodeWithoutTheTasksCpuNowComesLast"],
        simulation=False,
    ),
    dict(
        name="runtime-not-filtered",
        hole="a task is bound to a node whose runtime cannot start it (an image-only task on a process node, a task with neither anywhere) and fails there",
        file="src/ledger/cluster_view.h",
        old="""  if (!CanLaunch(n, request)) return RejectReason::kNodeRuntime;
  if (request.cpu_milli > n.free_cpu_milli()) return RejectReason::kNodeCpu;""",
        new="""  if (request.cpu_milli > n.free_cpu_milli()) return RejectReason::kNodeCpu;""",
        tests=["ledger_test/LedgerTest.*Runtime*",
               "hf_frag_policy_test/HfFragPolicyTest.*Runtime*",
               "agent_e2e_test/AgentE2eTest.EachTaskGoesToANodeWhoseRuntimeCanStartIt"],
        simulation=True,
    ),
    dict(
        name="bind-wakes-no-agent",
        hole="a bound task waits for its agent's next heartbeat (5 s by default) to start: the server does not move the node's work generation when it binds",
        file="src/server/scheduler.cc",
        old="""      host_->NodeHasWork(d.slice.node_id);""",
        new="""""",
        tests=["api_agent_e2e_test/AgentFlowTest.AWaitForWorkEndsWhenATaskIsBoundOrCancelledThere",
               "agent_e2e_test/AgentE2eTest.ATaskStartsAndStopsAtOnceNotAtTheNextHeartbeat"],
        simulation=False,
    ),
    dict(
        name="cancel-wakes-no-agent",
        hole="a cancelled task runs on until its agent's next heartbeat: the server does not move the node's work generation when a task it runs is cancelled",
        file="src/server/tasks.cc",
        old="""    host_->NodeHasWork(*out.node_id);""",
        new="""""",
        tests=["api_agent_e2e_test/AgentFlowTest.AWaitForWorkEndsWhenATaskIsBoundOrCancelledThere",
               "agent_e2e_test/AgentE2eTest.ATaskStartsAndStopsAtOnceNotAtTheNextHeartbeat"],
        simulation=False,
    ),
    dict(
        name="slice-delete-wakes-no-agent",
        hole="a task whose slice an operator deleted runs on until its agent's next heartbeat: the server does not move the node's work generation",
        file="src/server/operator_slices.cc",
        old="""    host_->NodeHasWork(out.node_id);  // it stops the slice's task""",
        new="""""",
        tests=["api_agent_e2e_test/AgentFlowTest.AWaitForWorkEndsWhenATaskIsBoundOrCancelledThere"],
        simulation=False,
    ),
]
