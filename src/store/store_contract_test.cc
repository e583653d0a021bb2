// The Store contract's tests (store_contract_test.h), compiled once and
// linked into each backend's test binary, which instantiates them.
#include "store/store_contract_test.h"

namespace hf::store::contract {

// ----------------------------------------------------------------- groups

TEST_P(StoreContractTest, GroupsInsertGetFindListDelete) {
  GroupRow in;
  in.name = "vision \"team\"";
  in.created_at = 123;
  const GroupRow a = MustWrite([&](Txn& t) { return t.InsertGroup(in); });
  EXPECT_GT(a.id, 0);
  EXPECT_EQ(a.name, in.name);
  in.name = "nlp";
  const GroupRow b = MustWrite([&](Txn& t) { return t.InsertGroup(in); });
  EXPECT_GT(b.id, a.id);

  EXPECT_EQ(Fields(MustRead([&](Txn& t) { return t.GetGroup(a.id); })),
            Fields(a));
  EXPECT_EQ(Fields(MustRead([&](Txn& t) { return t.FindGroup("nlp"); })),
            Fields(b));
  EXPECT_EQ(IdsOf(MustRead([](Txn& t) { return t.ListGroups(); })),
            (std::vector<RowId>{a.id, b.id}));

  ASSERT_TRUE(WriteStatus([&](Txn& t) { return t.DeleteGroup(a.id); }).ok());
  EXPECT_TRUE(
      HasCode(TryRead([&](Txn& t) { return t.GetGroup(a.id); }).status(),
              StatusCode::kNotFound));
  EXPECT_EQ(IdsOf(MustRead([](Txn& t) { return t.ListGroups(); })),
            (std::vector<RowId>{b.id}));
}

TEST_P(StoreContractTest, GroupNameIsUniqueAndMissingGroupsAreNotFound) {
  GroupRow in;
  in.name = "shared";
  MustWrite([&](Txn& t) { return t.InsertGroup(in); });
  const Status dup =
      TryWrite([&](Txn& t) { return t.InsertGroup(in); }).status();
  EXPECT_TRUE(HasCode(dup, StatusCode::kAlreadyExists));
  EXPECT_NE(dup.message().find("shared"), std::string::npos) << dup.message();

  EXPECT_TRUE(HasCode(TryRead([](Txn& t) { return t.GetGroup(999); }).status(),
                      StatusCode::kNotFound));
  EXPECT_TRUE(
      HasCode(TryRead([](Txn& t) { return t.FindGroup("nope"); }).status(),
              StatusCode::kNotFound));
  EXPECT_TRUE(HasCode(WriteStatus([](Txn& t) { return t.DeleteGroup(999); }),
                      StatusCode::kNotFound));
}

TEST_P(StoreContractTest, DeleteGroupClearsItsTenantsGroup) {
  GroupRow group;
  group.name = "g";
  const RowId g = MustWrite([&](Txn& t) { return t.InsertGroup(group); }).id;
  group.name = "other";
  const RowId other =
      MustWrite([&](Txn& t) { return t.InsertGroup(group); }).id;
  TenantRow tenant;
  tenant.name = "in-g";
  tenant.group_id = g;
  const RowId in_g =
      MustWrite([&](Txn& t) { return t.InsertTenant(tenant); }).id;
  tenant.name = "in-other";
  tenant.group_id = other;
  const RowId in_other =
      MustWrite([&](Txn& t) { return t.InsertTenant(tenant); }).id;

  ASSERT_TRUE(WriteStatus([&](Txn& t) { return t.DeleteGroup(g); }).ok());
  EXPECT_EQ(MustRead([&](Txn& t) { return t.GetTenant(in_g); }).group_id,
            std::nullopt);
  EXPECT_EQ(MustRead([&](Txn& t) { return t.GetTenant(in_other); }).group_id,
            std::optional<RowId>(other));
}

// ---------------------------------------------------------------- tenants

TEST_P(StoreContractTest, TenantsInsertGetFindList) {
  TenantRow in;
  in.name = "acme 日本";
  in.created_at = 55;
  const TenantRow a = MustWrite([&](Txn& t) { return t.InsertTenant(in); });
  EXPECT_GT(a.id, 0);
  EXPECT_EQ(a.group_id, std::nullopt);
  TenantRow expected = in;
  expected.id = a.id;
  EXPECT_EQ(Fields(a), Fields(expected));
  EXPECT_EQ(Fields(MustRead([&](Txn& t) { return t.GetTenant(a.id); })),
            Fields(expected));
  EXPECT_EQ(Fields(MustRead([&](Txn& t) { return t.FindTenant("acme 日本"); })),
            Fields(expected));

  in.name = "beta";
  const TenantRow b = MustWrite([&](Txn& t) { return t.InsertTenant(in); });
  EXPECT_EQ(IdsOf(MustRead([](Txn& t) { return t.ListTenants(); })),
            (std::vector<RowId>{a.id, b.id}));

  const Status dup =
      TryWrite([&](Txn& t) { return t.InsertTenant(in); }).status();
  EXPECT_TRUE(HasCode(dup, StatusCode::kAlreadyExists));
  EXPECT_NE(dup.message().find("beta"), std::string::npos) << dup.message();
  EXPECT_TRUE(HasCode(TryRead([](Txn& t) { return t.GetTenant(404); }).status(),
                      StatusCode::kNotFound));
  EXPECT_TRUE(
      HasCode(TryRead([](Txn& t) { return t.FindTenant("nope"); }).status(),
              StatusCode::kNotFound));
}

TEST_P(StoreContractTest, SetTenantGroupSetsClearsAndChecksBothRows) {
  const RowId tenant = AddTenant("t");
  GroupRow group;
  group.name = "g";
  const RowId g = MustWrite([&](Txn& t) { return t.InsertGroup(group); }).id;

  ASSERT_TRUE(
      WriteStatus([&](Txn& t) { return t.SetTenantGroup(tenant, g); }).ok());
  EXPECT_EQ(MustRead([&](Txn& t) { return t.GetTenant(tenant); }).group_id,
            std::optional<RowId>(g));
  ASSERT_TRUE(WriteStatus([&](Txn& t) {
                return t.SetTenantGroup(tenant, std::nullopt);
              }).ok());
  EXPECT_EQ(MustRead([&](Txn& t) { return t.GetTenant(tenant); }).group_id,
            std::nullopt);

  EXPECT_TRUE(
      HasCode(WriteStatus([&](Txn& t) { return t.SetTenantGroup(999, g); }),
              StatusCode::kNotFound));
  EXPECT_TRUE(HasCode(
      WriteStatus([&](Txn& t) { return t.SetTenantGroup(tenant, 999); }),
      StatusCode::kNotFound));
}

// ----------------------------------------------------------------- tokens

TEST_P(StoreContractTest, TokensRoundTripEveryRole) {
  const RowId tenant = AddTenant("t");
  const Role roles[] = {Role::kAdmin, Role::kTenantAdmin, Role::kUser,
                        Role::kNode};
  int n = 0;
  for (const Role role : roles) {
    TokenRow in;
    in.hash = std::string(64, static_cast<char>('a' + n++));
    in.role = role;
    if (role == Role::kTenantAdmin || role == Role::kUser) {
      in.tenant_id = tenant;
    }
    if (role == Role::kNode) in.node = "gpu-node-7";
    in.description = "for \"ci\"\n" + Awkward();
    in.created_at = 99;
    const TokenRow stored =
        MustWrite([&](Txn& t) { return t.InsertToken(in); });
    EXPECT_GT(stored.id, 0);
    TokenRow expected = in;
    expected.id = stored.id;
    EXPECT_EQ(Fields(stored), Fields(expected));
    EXPECT_EQ(Fields(MustRead([&](Txn& t) { return t.GetToken(stored.id); })),
              Fields(expected));
    EXPECT_EQ(
        Fields(MustRead([&](Txn& t) { return t.FindTokenByHash(in.hash); })),
        Fields(expected));
  }
  EXPECT_TRUE(HasCode(TryRead([](Txn& t) { return t.GetToken(999); }).status(),
                      StatusCode::kNotFound));
  EXPECT_TRUE(HasCode(
      TryRead([](Txn& t) { return t.FindTokenByHash("0000"); }).status(),
      StatusCode::kNotFound));
}

TEST_P(StoreContractTest, ApprovalsRoundTripAndRevokeKeepsTheFirstTime) {
  const RowId a = AddTenant("a");
  const RowId b = AddTenant("b");
  ApprovalRow in;
  in.tenant_a = a;
  in.tenant_b = b;
  in.reason = "joint eval \"q4\"\n" + Awkward();
  in.created_by = "token:1";
  in.created_at = 1000;
  in.expires_at = 5000;
  const ApprovalRow stored =
      MustWrite([&](Txn& t) { return t.InsertApproval(in); });
  EXPECT_GT(stored.id, 0);
  ApprovalRow expected = in;
  expected.id = stored.id;
  EXPECT_EQ(Fields(MustRead([&](Txn& t) { return t.GetApproval(stored.id); })),
            Fields(expected));
  EXPECT_TRUE(stored.ActiveAt(4999));
  EXPECT_FALSE(stored.ActiveAt(5000));
  in.reason = "second";
  const RowId second =
      MustWrite([&](Txn& t) { return t.InsertApproval(in); }).id;
  EXPECT_EQ(IdsOf(MustRead([](Txn& t) { return t.ListApprovals(); })),
            (std::vector<RowId>{stored.id, second}));
  ASSERT_TRUE(WriteStatus([&](Txn& t) {
                return t.RevokeApproval(stored.id, 2000);
              }).ok());
  ASSERT_TRUE(WriteStatus([&](Txn& t) {
                return t.RevokeApproval(stored.id, 3000);
              }).ok());
  const ApprovalRow revoked =
      MustRead([&](Txn& t) { return t.GetApproval(stored.id); });
  EXPECT_EQ(revoked.revoked_at, std::optional<Millis>(2000));
  EXPECT_FALSE(revoked.ActiveAt(1500 + 1000));
  EXPECT_EQ(WriteStatus([](Txn& t) { return t.RevokeApproval(999, 1); }).code(),
            StatusCode::kNotFound);
  EXPECT_TRUE(
      HasCode(TryRead([](Txn& t) { return t.GetApproval(999); }).status(),
              StatusCode::kNotFound));
}

TEST_P(StoreContractTest, TaskLogsAppendInOrderAndReadByOffset) {
  const RowId tenant = AddTenant("t");
  TaskRow task;
  task.tenant_id = tenant;
  task.name = "logs";
  const RowId id = MustWrite([&](Txn& t) { return t.InsertTask(task); }).id;
  EXPECT_EQ(MustRead([&](Txn& t) { return t.TaskLogSize(id); }), 0);
  const std::string binary("a\0b\xff\n", 5);
  ASSERT_TRUE(
      WriteStatus([&](Txn& t) { return t.AppendTaskLog(id, 0, binary); }).ok());
  ASSERT_TRUE(WriteStatus([&](Txn& t) {
                return t.AppendTaskLog(id, 5, "hello\n");
              }).ok());
  ASSERT_TRUE(
      WriteStatus([&](Txn& t) { return t.AppendTaskLog(id, 11, ""); }).ok());
  // Only at the end: a gap or an overlap is refused, and nothing changes.
  EXPECT_EQ(
      WriteStatus([&](Txn& t) { return t.AppendTaskLog(id, 5, "x"); }).code(),
      StatusCode::kFailedPrecondition);
  EXPECT_EQ(
      WriteStatus([&](Txn& t) { return t.AppendTaskLog(id, 99, "x"); }).code(),
      StatusCode::kFailedPrecondition);
  EXPECT_EQ(MustRead([&](Txn& t) { return t.TaskLogSize(id); }), 11);
  EXPECT_EQ(MustRead([&](Txn& t) { return t.ReadTaskLog(id, 0, 100); }),
            binary + "hello\n");
  EXPECT_EQ(MustRead([&](Txn& t) { return t.ReadTaskLog(id, 3, 4); }),
            std::string("\xff\nhe", 4));
  EXPECT_EQ(MustRead([&](Txn& t) { return t.ReadTaskLog(id, 11, 100); }), "");
  EXPECT_EQ(MustRead([&](Txn& t) { return t.ReadTaskLog(id, 50, 100); }), "");
  EXPECT_EQ(MustRead([&](Txn& t) { return t.TaskLogSize(id + 1); }), 0);
}

TEST_P(StoreContractTest, TokenHashIsUnique) {
  TokenRow in;
  in.hash = "deadbeef";
  in.role = Role::kAdmin;
  MustWrite([&](Txn& t) { return t.InsertToken(in); });
  in.description = "another";
  EXPECT_TRUE(
      HasCode(TryWrite([&](Txn& t) { return t.InsertToken(in); }).status(),
              StatusCode::kAlreadyExists));
}

TEST_P(StoreContractTest, ListTokensFiltersByTenant) {
  const RowId a = AddTenant("a");
  const RowId b = AddTenant("b");
  std::vector<RowId> of_a;
  std::vector<RowId> all;
  for (int i = 0; i < 6; ++i) {
    TokenRow in;
    in.hash = "hash-" + std::to_string(i);
    in.role = i == 0 ? Role::kAdmin : Role::kUser;
    if (i > 0) in.tenant_id = i % 2 == 0 ? a : b;
    const RowId id = MustWrite([&](Txn& t) { return t.InsertToken(in); }).id;
    all.push_back(id);
    if (in.tenant_id == a) of_a.push_back(id);
  }
  EXPECT_EQ(IdsOf(MustRead([](Txn& t) { return t.ListTokens(std::nullopt); })),
            all);
  EXPECT_EQ(IdsOf(MustRead([&](Txn& t) { return t.ListTokens(a); })), of_a);
  EXPECT_TRUE(MustRead([](Txn& t) { return t.ListTokens(999); }).empty());
}

TEST_P(StoreContractTest, RevokeTokenIsIdempotentAndKeepsTheFirstTime) {
  TokenRow in;
  in.hash = "h";
  in.role = Role::kNode;
  const RowId id = MustWrite([&](Txn& t) { return t.InsertToken(in); }).id;
  ASSERT_TRUE(WriteStatus([&](Txn& t) { return t.RevokeToken(id, 500); }).ok());
  ASSERT_TRUE(WriteStatus([&](Txn& t) { return t.RevokeToken(id, 900); }).ok());
  EXPECT_EQ(MustRead([&](Txn& t) { return t.GetToken(id); }).revoked_at,
            std::optional<Millis>(500));
  EXPECT_TRUE(HasCode(WriteStatus([](Txn& t) { return t.RevokeToken(999, 1); }),
                      StatusCode::kNotFound));
}

// ------------------------------------------------------- nodes and GPUs

TEST_P(StoreContractTest, UpsertNodeInsertsThenUpdatesInPlace) {
  NodeRow in;
  in.name = "node-1";
  in.containerized = true;
  in.cpu_milli = 96000;
  in.host_memory_mib = 1 << 20;
  in.agent_version = "0.1.0";
  in.registered_at = 100;
  in.last_heartbeat_at = 100;
  in.report_epoch = 3;
  in.report_seq = 41;
  in.runtime = "process";
  const NodeRow first = MustWrite([&](Txn& t) { return t.UpsertNode(in); });
  EXPECT_GT(first.id, 0);
  NodeRow expected = in;
  expected.id = first.id;
  EXPECT_EQ(Fields(first), Fields(expected));

  NodeRow again = in;
  again.containerized = false;
  again.cpu_milli = 48000;
  again.host_memory_mib = 1 << 19;
  again.agent_version = "0.2.0 \"beta\"";
  again.registered_at = 700;  // a re-registration keeps the first time
  again.last_heartbeat_at = 700;
  again.report_epoch = 4;
  again.report_seq = (std::int64_t{1} << 53) - 1;  // the largest it may be
  again.runtime = "docker";
  const NodeRow second = MustWrite([&](Txn& t) { return t.UpsertNode(again); });
  expected = again;
  expected.id = first.id;
  expected.registered_at = 100;
  EXPECT_EQ(Fields(second), Fields(expected));
  EXPECT_EQ(Fields(MustRead([&](Txn& t) { return t.GetNode(first.id); })),
            Fields(expected));
  EXPECT_EQ(Fields(MustRead([](Txn& t) { return t.FindNode("node-1"); })),
            Fields(expected));

  in.name = "node-2";
  const RowId n2 = MustWrite([&](Txn& t) { return t.UpsertNode(in); }).id;
  EXPECT_EQ(IdsOf(MustRead([](Txn& t) { return t.ListNodes(); })),
            (std::vector<RowId>{first.id, n2}));
  EXPECT_TRUE(HasCode(TryRead([](Txn& t) { return t.GetNode(999); }).status(),
                      StatusCode::kNotFound));
  EXPECT_TRUE(
      HasCode(TryRead([](Txn& t) { return t.FindNode("node-9"); }).status(),
              StatusCode::kNotFound));
}

TEST_P(StoreContractTest, UpsertGpuKeysOnNodeAndIndex) {
  const RowId n1 = AddNode("n1");
  const RowId n2 = AddNode("n2");
  auto gpu = [](RowId node, int index) {
    GpuRow g;
    g.node_id = node;
    g.index = index;
    g.uuid = "GPU-" + std::to_string(node) + "-" + std::to_string(index);
    g.vendor = "nvidia";
    g.model = "NVIDIA A100-SXM4-80GB";
    g.memory_mib = 81920;
    g.cc_major = 8;
    g.cc_minor = 0;
    g.mig_capable = true;
    g.mps_capable = true;
    g.updated_at = 5;
    return g;
  };
  // Inserted out of order: lists are ordered by (node, index).
  const GpuRow n2g0 =
      MustWrite([&](Txn& t) { return t.UpsertGpu(gpu(n2, 0)); });
  const GpuRow n1g1 =
      MustWrite([&](Txn& t) { return t.UpsertGpu(gpu(n1, 1)); });
  const GpuRow n1g0 =
      MustWrite([&](Txn& t) { return t.UpsertGpu(gpu(n1, 0)); });
  EXPECT_GT(n1g0.id, 0);
  GpuRow expected = gpu(n1, 0);
  expected.id = n1g0.id;
  EXPECT_EQ(Fields(n1g0), Fields(expected));

  GpuRow changed = gpu(n1, 1);
  changed.lost = true;
  changed.mig_capable = false;
  changed.model = "NVIDIA A100 (lost)";
  changed.updated_at = 9;
  const GpuRow updated =
      MustWrite([&](Txn& t) { return t.UpsertGpu(changed); });
  EXPECT_EQ(updated.id, n1g1.id);
  changed.id = n1g1.id;

  const std::vector<GpuRow> all =
      MustRead([](Txn& t) { return t.ListGpus(std::nullopt); });
  EXPECT_EQ(IdsOf(all), (std::vector<RowId>{n1g0.id, n1g1.id, n2g0.id}));
  ASSERT_EQ(all.size(), 3u);
  EXPECT_EQ(Fields(all[1]), Fields(changed));
  EXPECT_EQ(IdsOf(MustRead([&](Txn& t) { return t.ListGpus(n2); })),
            (std::vector<RowId>{n2g0.id}));
  EXPECT_TRUE(MustRead([](Txn& t) { return t.ListGpus(999); }).empty());

  EXPECT_TRUE(HasCode(
      TryWrite([&](Txn& t) { return t.UpsertGpu(gpu(999, 0)); }).status(),
      StatusCode::kNotFound));
}

// ------------------------------------------------------------------ tasks

TEST_P(StoreContractTest, TaskRoundTripsEveryFieldIncludingJson) {
  const RowId tenant = AddTenant("t");
  const RowId node = AddNode("n");
  const TaskRow in = FullTask(tenant, node);
  const TaskRow stored = MustWrite([&](Txn& t) { return t.InsertTask(in); });
  EXPECT_GT(stored.id, 0);
  TaskRow expected = in;
  expected.id = stored.id;
  EXPECT_EQ(Fields(stored), Fields(expected));
  EXPECT_EQ(Fields(MustRead([&](Txn& t) { return t.GetTask(stored.id); })),
            Fields(expected));

  // The unset optionals and empty containers come back unset and empty.
  TaskRow bare;
  bare.tenant_id = tenant;
  const TaskRow bare_stored =
      MustWrite([&](Txn& t) { return t.InsertTask(bare); });
  bare.id = bare_stored.id;
  EXPECT_EQ(Fields(MustRead([&](Txn& t) { return t.GetTask(bare.id); })),
            Fields(bare));
}

TEST_P(StoreContractTest, MissingTaskIsNotFoundAndNamesIt) {
  const Status missing = TryRead([](Txn& t) { return t.GetTask(12); }).status();
  EXPECT_TRUE(HasCode(missing, StatusCode::kNotFound));
  EXPECT_NE(missing.message().find("task 12"), std::string::npos)
      << missing.message();
}

TEST_P(StoreContractTest, TaskOfUnknownTenantIsRefused) {
  EXPECT_TRUE(HasCode(TryWrite([](Txn& t) {
                        return t.InsertTask(PendingTask(999, "orphan"));
                      }).status(),
                      StatusCode::kNotFound));
}

TEST_P(StoreContractTest, UpdateTaskIsACompareAndSet) {
  const RowId tenant = AddTenant("t");
  const RowId node = AddNode("n");
  TaskRow task = MustWrite(
      [&](Txn& t) { return t.InsertTask(PendingTask(tenant, "job")); });
  const std::int64_t v0 = task.version;

  TaskRow next = FullTask(tenant, node);
  next.id = task.id;
  next.version = v0;
  const TaskRow updated = MustWrite([&](Txn& t) { return t.UpdateTask(next); });
  EXPECT_EQ(updated.version, v0 + 1);
  TaskRow expected = next;
  expected.version = v0 + 1;
  EXPECT_EQ(Fields(updated), Fields(expected));
  EXPECT_EQ(Fields(MustRead([&](Txn& t) { return t.GetTask(task.id); })),
            Fields(expected));

  // A writer still holding version v0 loses, and changes nothing.
  TaskRow stale = next;
  stale.state = TaskState::kCancelled;
  const Status lost =
      TryWrite([&](Txn& t) { return t.UpdateTask(stale); }).status();
  EXPECT_TRUE(HasCode(lost, StatusCode::kAborted));
  EXPECT_EQ(MustRead([&](Txn& t) { return t.GetTask(task.id); }).state,
            TaskState::kRunning);

  // Retrying from the current row wins and bumps the version again.
  TaskRow fresh = MustRead([&](Txn& t) { return t.GetTask(task.id); });
  fresh.state = TaskState::kSucceeded;
  fresh.exit_code = 0;
  fresh.slice_id.reset();
  fresh.node_id.reset();
  fresh.gpu_indices.clear();
  fresh.memory_mib.reset();
  fresh.compute_percent.reset();
  const TaskRow done = MustWrite([&](Txn& t) { return t.UpdateTask(fresh); });
  EXPECT_EQ(done.version, v0 + 2);
  fresh.version = v0 + 2;
  EXPECT_EQ(Fields(MustRead([&](Txn& t) { return t.GetTask(task.id); })),
            Fields(fresh));

  // Two updates of one version in one transaction: the second loses.
  TaskRow twice = MustRead([&](Txn& t) { return t.GetTask(task.id); });
  const Status second = WriteStatus([&](Txn& t) {
    StatusOr<TaskRow> first = t.UpdateTask(twice);
    if (!first.ok()) return first.status();
    return t.UpdateTask(twice).status();
  });
  EXPECT_TRUE(HasCode(second, StatusCode::kAborted));
  EXPECT_EQ(MustRead([&](Txn& t) { return t.GetTask(task.id); }).version,
            v0 + 2);  // the whole Write was rolled back

  TaskRow ghost = fresh;
  ghost.id = 999;
  EXPECT_TRUE(
      HasCode(TryWrite([&](Txn& t) { return t.UpdateTask(ghost); }).status(),
              StatusCode::kNotFound));
}

TEST_P(StoreContractTest, ListTasksFiltersAndPages) {
  const RowId a = AddTenant("a");
  const RowId b = AddTenant("b");
  const RowId n1 = AddNode("n1");
  const RowId n2 = AddNode("n2");
  // 12 tasks: tenant alternates, state cycles pending/running/failed, the
  // running ones sit on n1 or n2.
  std::vector<TaskRow> tasks;
  for (int i = 0; i < 12; ++i) {
    TaskRow t = PendingTask(i % 2 == 0 ? a : b, "task-" + std::to_string(i));
    if (i % 3 == 1) {
      t.state = TaskState::kRunning;
      t.node_id = i % 4 == 1 ? n1 : n2;
    } else if (i % 3 == 2) {
      t.state = TaskState::kFailed;
    }
    tasks.push_back(MustWrite([&](Txn& txn) { return txn.InsertTask(t); }));
  }
  auto expect = [&](auto keep) {
    std::vector<RowId> ids;
    for (const TaskRow& t : tasks) {
      if (keep(t)) ids.push_back(t.id);
    }
    return ids;
  };
  auto list = [&](TaskFilter f) {
    return IdsOf(MustRead([&](Txn& t) { return t.ListTasks(f); }));
  };

  TaskFilter f;
  EXPECT_EQ(list(f), expect([](const TaskRow&) { return true; }));
  f.state = TaskState::kRunning;
  EXPECT_EQ(list(f), expect([](const TaskRow& t) {
              return t.state == TaskState::kRunning;
            }));
  f.tenant_id = b;
  EXPECT_EQ(list(f), expect([&](const TaskRow& t) {
              return t.state == TaskState::kRunning && t.tenant_id == b;
            }));
  f = {};
  f.node_id = n1;
  EXPECT_EQ(list(f), expect([&](const TaskRow& t) {
              return t.node_id == std::optional<RowId>(n1);
            }));
  f = {};
  f.tenant_id = a;
  f.state = TaskState::kSucceeded;
  EXPECT_TRUE(list(f).empty());

  // Pages of 5: ascending, no overlap, nothing skipped.
  std::vector<RowId> paged;
  f = {};
  f.limit = 5;
  for (;;) {
    const std::vector<RowId> page = list(f);
    ASSERT_LE(page.size(), 5u);
    if (page.empty()) break;
    paged.insert(paged.end(), page.begin(), page.end());
    f.after_id = page.back();
  }
  EXPECT_EQ(paged, expect([](const TaskRow&) { return true; }));
  EXPECT_TRUE(std::is_sorted(paged.begin(), paged.end()));

  f = {};
  f.tenant_id = a;
  f.after_id = tasks[4].id;
  f.limit = 2;
  EXPECT_EQ(list(f), (std::vector<RowId>{tasks[6].id, tasks[8].id}));
}

TEST_P(StoreContractTest, MaxTaskIdIsZeroThenTheHighestId) {
  EXPECT_EQ(MustRead([](Txn& t) { return t.MaxTaskId(); }), 0);
  const RowId tenant = AddTenant("t");
  AddTask(tenant, "one");
  const RowId last = AddTask(tenant, "two");
  EXPECT_EQ(MustRead([](Txn& t) { return t.MaxTaskId(); }), last);
}

// ----------------------------------------------------------------- slices

TEST_P(StoreContractTest, SliceKeepsItsIdAndRoundTrips) {
  const RowId tenant = AddTenant("t");
  const RowId node = AddNode("n");
  const RowId task = AddTask(tenant, "job");
  SliceRow in = MakeSlice(1'000'000'007, tenant, node, {2});
  in.task_id = task;
  in.compute_defaulted = true;
  in.qos_level = "gold";
  in.enforcement = {"mps", "hook", Awkward()};
  in.origin = "compensation";
  in.mig_device_id = "MIG-5f3c\"x\"";
  in.mig_profile = "3g.40gb";
  in.mig_start = 4;
  in.released_at = 3000;
  ASSERT_TRUE(WriteStatus([&](Txn& t) { return t.InsertSlice(in); }).ok());
  EXPECT_EQ(Fields(MustRead([&](Txn& t) { return t.GetSlice(in.id); })),
            Fields(in));

  const Status dup = WriteStatus([&](Txn& t) { return t.InsertSlice(in); });
  EXPECT_TRUE(HasCode(dup, StatusCode::kAlreadyExists));
  EXPECT_TRUE(HasCode(TryRead([](Txn& t) { return t.GetSlice(5); }).status(),
                      StatusCode::kNotFound));

  SliceRow reservation = MakeSlice(3, tenant, node, {0, 1, 2, 3});
  reservation.origin = "admin";  // no task
  ASSERT_TRUE(
      WriteStatus([&](Txn& t) { return t.InsertSlice(reservation); }).ok());
  EXPECT_EQ(Fields(MustRead([&](Txn& t) { return t.GetSlice(3); })),
            Fields(reservation));
}

TEST_P(StoreContractTest, SliceOfUnknownNodeIsRefused) {
  const RowId tenant = AddTenant("t");
  EXPECT_TRUE(HasCode(WriteStatus([&](Txn& t) {
                        return t.InsertSlice(MakeSlice(1, tenant, 999, {0}));
                      }),
                      StatusCode::kNotFound));
}

TEST_P(StoreContractTest, UpdateSliceWritesEveryFieldOrIsNotFound) {
  const RowId tenant = AddTenant("t");
  const RowId node = AddNode("n");
  const SliceRow in = MakeSlice(10, tenant, node, {1});
  ASSERT_TRUE(WriteStatus([&](Txn& t) { return t.InsertSlice(in); }).ok());
  SliceRow changed = in;
  changed.state = SliceState::kReleased;
  changed.released_at = 4000;
  changed.mig_device_id = "MIG-1";
  changed.mig_profile = "1g.10gb";
  changed.mig_start = 6;
  changed.enforcement = {};
  changed.gpu_indices = {1, 2};
  ASSERT_TRUE(WriteStatus([&](Txn& t) { return t.UpdateSlice(changed); }).ok());
  EXPECT_EQ(Fields(MustRead([&](Txn& t) { return t.GetSlice(10); })),
            Fields(changed));
  changed.id = 11;
  EXPECT_TRUE(
      HasCode(WriteStatus([&](Txn& t) { return t.UpdateSlice(changed); }),
              StatusCode::kNotFound));
}

TEST_P(StoreContractTest, MaxSliceIdIsZeroThenTheHighestId) {
  EXPECT_EQ(MustRead([](Txn& t) { return t.MaxSliceId(); }), 0);
  const RowId tenant = AddTenant("t");
  const RowId node = AddNode("n");
  for (const RowId id : {RowId{40}, RowId{7}, RowId{23}}) {
    ASSERT_TRUE(WriteStatus([&](Txn& t) {
                  return t.InsertSlice(MakeSlice(id, tenant, node, {0}));
                }).ok());
  }
  EXPECT_EQ(MustRead([](Txn& t) { return t.MaxSliceId(); }), 40);
}

TEST_P(StoreContractTest, SliceUsageIsStoredReplacedAndReadBack) {
  EXPECT_FALSE(MustRead([](Txn& t) { return t.GetSliceUsage(7); }).has_value());
  ASSERT_TRUE(WriteStatus([](Txn& t) {
                return t.PutSliceUsage({7, 1000, R"({"used_bytes":1})"});
              }).ok());
  ASSERT_TRUE(WriteStatus([](Txn& t) {
                return t.PutSliceUsage({8, 1500, R"({"used_bytes":5})"});
              }).ok());
  ASSERT_TRUE(WriteStatus([](Txn& t) {
                return t.PutSliceUsage({7, 2000, R"({"used_bytes":2})"});
              }).ok());
  const auto seven = MustRead([](Txn& t) { return t.GetSliceUsage(7); });
  ASSERT_TRUE(seven.has_value());
  EXPECT_EQ(seven->slice_id, 7);
  EXPECT_EQ(seven->reported_at, 2000);
  EXPECT_EQ(seven->usage, R"({"used_bytes":2})");
  const auto eight = MustRead([](Txn& t) { return t.GetSliceUsage(8); });
  ASSERT_TRUE(eight.has_value());
  EXPECT_EQ(eight->usage, R"({"used_bytes":5})");
}

namespace {

// The usage JSON of report `n` (any text does: the store keeps it as is).
std::string UsageOf(int n) {
  return R"({"used_bytes":)" + std::to_string(n) + "}";
}

std::vector<Millis> TimesOf(const std::vector<SliceUsageRow>& rows) {
  std::vector<Millis> out;
  for (const SliceUsageRow& r : rows) out.push_back(r.reported_at);
  return out;
}

}  // namespace

TEST_P(StoreContractTest, SliceUsageHistoryKeepsEveryStoredRowOldestFirst) {
  EXPECT_TRUE(MustRead([](Txn& t) {
                return t.ListSliceUsageHistory(7, 0, kSliceUsageHistoryRows);
              }).empty());
  // Stored out of order across slices: each slice's rows come back by time.
  for (const auto& [slice, at] : std::vector<std::pair<RowId, Millis>>{
           {7, 1000}, {8, 1500}, {7, 2000}, {7, 3000}, {8, 2500}}) {
    ASSERT_TRUE(
        WriteStatus([&, slice = slice, at = at](Txn& t) {
          return t.PutSliceUsage({slice, at, UsageOf(static_cast<int>(at))});
        }).ok());
  }
  const auto seven = MustRead([](Txn& t) {
    return t.ListSliceUsageHistory(7, 0, kSliceUsageHistoryRows);
  });
  EXPECT_EQ(TimesOf(seven), (std::vector<Millis>{1000, 2000, 3000}));
  ASSERT_EQ(seven.size(), 3u);
  EXPECT_EQ(seven[0].slice_id, 7);
  EXPECT_EQ(seven[0].usage, UsageOf(1000));
  EXPECT_EQ(seven[2].usage, UsageOf(3000));
  EXPECT_EQ(TimesOf(MustRead([](Txn& t) {
              return t.ListSliceUsageHistory(8, 0, kSliceUsageHistoryRows);
            })),
            (std::vector<Millis>{1500, 2500}));
  // The latest row is the newest one stored, as before.
  EXPECT_EQ(MustRead([](Txn& t) { return t.GetSliceUsage(7); })->reported_at,
            3000);
  // The same time again replaces that row rather than adding one.
  ASSERT_TRUE(WriteStatus([](Txn& t) {
                return t.PutSliceUsage({7, 3000, UsageOf(3001)});
              }).ok());
  const auto replaced = MustRead([](Txn& t) {
    return t.ListSliceUsageHistory(7, 0, kSliceUsageHistoryRows);
  });
  EXPECT_EQ(TimesOf(replaced), (std::vector<Millis>{1000, 2000, 3000}));
  EXPECT_EQ(replaced.back().usage, UsageOf(3001));
  // A write that fails leaves no history row behind.
  EXPECT_FALSE(WriteStatus([](Txn& t) -> Status {
                 HF_RETURN_IF_ERROR(t.PutSliceUsage({7, 4000, UsageOf(4000)}));
                 return Status::Aborted("changed my mind");
               }).ok());
  EXPECT_EQ(MustRead([](Txn& t) {
              return t.ListSliceUsageHistory(7, 0, kSliceUsageHistoryRows);
            }).size(),
            3u);
}

TEST_P(StoreContractTest, SliceUsageHistoryKeepsTheNewestRowsPerSlice) {
  const int extra = 5;
  // One transaction for the most, then one per row across the cap.
  ASSERT_TRUE(WriteStatus([&](Txn& t) -> Status {
                for (int i = 0; i < kSliceUsageHistoryRows - 2; ++i) {
                  HF_RETURN_IF_ERROR(
                      t.PutSliceUsage({7, 1000 + Millis{i}, UsageOf(i)}));
                }
                return t.PutSliceUsage({8, 5, UsageOf(5)});
              }).ok());
  for (int i = kSliceUsageHistoryRows - 2; i < kSliceUsageHistoryRows + extra;
       ++i) {
    ASSERT_TRUE(WriteStatus([&](Txn& t) {
                  return t.PutSliceUsage({7, 1000 + Millis{i}, UsageOf(i)});
                }).ok());
  }
  const auto kept = MustRead([](Txn& t) {
    return t.ListSliceUsageHistory(7, 0, kSliceUsageHistoryRows);
  });
  ASSERT_EQ(kept.size(), static_cast<std::size_t>(kSliceUsageHistoryRows));
  EXPECT_EQ(kept.front().reported_at, 1000 + extra);
  EXPECT_EQ(kept.back().reported_at, 1000 + kSliceUsageHistoryRows + extra - 1);
  EXPECT_TRUE(std::ranges::is_sorted(TimesOf(kept)));
  // Asking for more finds no older row: they are gone, not hidden.
  EXPECT_EQ(MustRead([](Txn& t) {
              return t.ListSliceUsageHistory(7, 0, 1000);
            }).size(),
            static_cast<std::size_t>(kSliceUsageHistoryRows));
  // Another slice's rows are its own.
  EXPECT_EQ(TimesOf(MustRead([](Txn& t) {
              return t.ListSliceUsageHistory(8, 0, kSliceUsageHistoryRows);
            })),
            std::vector<Millis>{5});
}

TEST_P(StoreContractTest, SliceUsageHistoryFromATimeAndAtMostALimit) {
  ASSERT_TRUE(WriteStatus([](Txn& t) -> Status {
                for (Millis at : {1000, 2000, 3000, 4000, 5000}) {
                  HF_RETURN_IF_ERROR(
                      t.PutSliceUsage({7, at, UsageOf(static_cast<int>(at))}));
                }
                return Status::Ok();
              }).ok());
  const auto read = [&](Millis since, int limit) {
    return TimesOf(MustRead(
        [&](Txn& t) { return t.ListSliceUsageHistory(7, since, limit); }));
  };
  // `since` is inclusive.
  EXPECT_EQ(read(3000, 10), (std::vector<Millis>{3000, 4000, 5000}));
  EXPECT_EQ(read(2500, 10), (std::vector<Millis>{3000, 4000, 5000}));
  EXPECT_EQ(read(5001, 10), std::vector<Millis>{});
  // `limit`: the newest rows, still oldest first.
  EXPECT_EQ(read(0, 2), (std::vector<Millis>{4000, 5000}));
  EXPECT_EQ(read(2000, 1), std::vector<Millis>{5000});
  EXPECT_TRUE(HasCode(
      TryRead([](Txn& t) { return t.ListSliceUsageHistory(7, 0, 0); }).status(),
      StatusCode::kInternal));
}

TEST_P(StoreContractTest, ListSlicesFiltersAndPages) {
  const RowId a = AddTenant("a");
  const RowId b = AddTenant("b");
  const RowId n1 = AddNode("n1");
  const RowId n2 = AddNode("n2");
  const std::vector<SliceRow> slices = {
      MakeSlice(1, a, n1, {0}),
      MakeSlice(2, b, n1, {1}, SliceState::kReleasing),
      MakeSlice(3, a, n1, {0, 1, 2, 3}),  // whole GPUs 0-3
      MakeSlice(4, a, n2, {2}, SliceState::kReleased),
      MakeSlice(5, b, n2, {0}),
      MakeSlice(6, a, n1, {12}, SliceState::kReleased),  // not "1" nor "2"
      MakeSlice(8, b, n1, {2}),
  };
  for (const SliceRow& s : slices) {
    ASSERT_TRUE(WriteStatus([&](Txn& t) { return t.InsertSlice(s); }).ok());
  }
  auto list = [&](SliceFilter f) {
    return IdsOf(MustRead([&](Txn& t) { return t.ListSlices(f); }));
  };
  using Ids = std::vector<RowId>;

  SliceFilter f;
  EXPECT_EQ(list(f), (Ids{1, 2, 3, 4, 5, 6, 8}));
  f.tenant_id = a;
  EXPECT_EQ(list(f), (Ids{1, 3, 4, 6}));
  f = {};
  f.node_id = n1;
  EXPECT_EQ(list(f), (Ids{1, 2, 3, 6, 8}));
  f.gpu_index = 2;  // matches any of a slice's GPUs
  EXPECT_EQ(list(f), (Ids{3, 8}));
  f.gpu_index = 1;
  EXPECT_EQ(list(f), (Ids{2, 3}));
  f.gpu_index = 7;
  EXPECT_TRUE(list(f).empty());
  f = {};
  f.state = SliceState::kReleased;
  EXPECT_EQ(list(f), (Ids{4, 6}));
  f = {};
  f.live_only = true;
  EXPECT_EQ(list(f), (Ids{1, 2, 3, 5, 8}));
  f.tenant_id = b;
  EXPECT_EQ(list(f), (Ids{2, 5, 8}));
  f = {};
  f.live_only = true;
  f.state = SliceState::kReleased;
  EXPECT_TRUE(list(f).empty());
  f = {};
  f.node_id = n2;
  f.gpu_index = 0;
  EXPECT_EQ(list(f), (Ids{5}));

  f = {};
  f.limit = 3;
  EXPECT_EQ(list(f), (Ids{1, 2, 3}));
  f.after_id = 3;
  EXPECT_EQ(list(f), (Ids{4, 5, 6}));
  f.after_id = 6;
  EXPECT_EQ(list(f), (Ids{8}));
  f.after_id = 8;
  EXPECT_TRUE(list(f).empty());
  f = {};
  f.live_only = true;
  f.after_id = 2;
  f.limit = 2;
  EXPECT_EQ(list(f), (Ids{3, 5}));
}

// ---------------------------------------------------------------- history

TEST_P(StoreContractTest, HistoryAppendsWithIncreasingIdsAndRoundTrips) {
  HistoryRow full;
  full.at = 123456;
  full.op = "allocate";
  full.slice_id = 9;
  full.task_id = 4;
  full.tenant_id = 2;
  full.node_id = 1;
  full.gpu_indices = {0, 1};
  full.memory_mib = 20480;
  full.compute_percent = 50;
  full.actor = "token:12";
  full.reason = "user asked \"nicely\"\n" + Awkward();
  // History is a log: it may name rows that do not exist (any more).
  const RowId first = MustWrite([&](Txn& t) { return t.AppendHistory(full); });
  HistoryRow bare;
  bare.op = "gc";
  const RowId second = MustWrite([&](Txn& t) { return t.AppendHistory(bare); });
  EXPECT_GT(first, 0);
  EXPECT_GT(second, first);

  const std::vector<HistoryRow> rows =
      MustRead([](Txn& t) { return t.ListHistory(HistoryFilter{}); });
  ASSERT_EQ(rows.size(), 2u);
  full.id = first;
  bare.id = second;
  EXPECT_EQ(Fields(rows[0]), Fields(full));
  EXPECT_EQ(Fields(rows[1]), Fields(bare));
}

TEST_P(StoreContractTest, ListHistoryFiltersAndPages) {
  std::vector<HistoryRow> rows;
  for (int i = 0; i < 10; ++i) {
    HistoryRow h;
    h.at = 1000 + i;
    h.op = i % 2 == 0 ? "allocate" : "release";
    h.tenant_id = i % 2 + 1;  // 1 or 2
    h.slice_id = i / 2 + 1;   // 1..5, each allocated then released
    if (i < 6) h.task_id = 100 + i / 2;
    h.id = MustWrite([&](Txn& t) { return t.AppendHistory(h); });
    rows.push_back(h);
  }
  auto list = [&](HistoryFilter f) {
    return IdsOf(MustRead([&](Txn& t) { return t.ListHistory(f); }));
  };
  auto expect = [&](auto keep) {
    std::vector<RowId> ids;
    for (const HistoryRow& h : rows) {
      if (keep(h)) ids.push_back(h.id);
    }
    return ids;
  };
  HistoryFilter f;
  EXPECT_EQ(list(f), expect([](const HistoryRow&) { return true; }));
  f.tenant_id = 2;
  EXPECT_EQ(list(f), expect([](const HistoryRow& h) {
              return h.tenant_id == std::optional<RowId>(2);
            }));
  f = {};
  f.slice_id = 3;
  EXPECT_EQ(list(f), (std::vector<RowId>{rows[4].id, rows[5].id}));
  f = {};
  f.task_id = 101;
  EXPECT_EQ(list(f), (std::vector<RowId>{rows[2].id, rows[3].id}));
  f.tenant_id = 1;
  EXPECT_EQ(list(f), (std::vector<RowId>{rows[2].id}));
  f = {};
  f.task_id = 999;
  EXPECT_TRUE(list(f).empty());
  f = {};
  f.after_id = rows[6].id;
  f.limit = 2;
  EXPECT_EQ(list(f), (std::vector<RowId>{rows[7].id, rows[8].id}));
  f.tenant_id = 1;
  f.after_id = rows[0].id;
  EXPECT_EQ(list(f), (std::vector<RowId>{rows[2].id, rows[4].id}));
}

TEST_P(StoreContractTest, ClientPagesWalkEveryRowOnceInPositionOrder) {
  const RowId a = AddTenant("a");
  const RowId b = AddTenant("b");
  std::vector<RowId> history;
  std::vector<RowId> tasks;
  std::vector<RowId> tasks_of_a;
  for (int i = 0; i < 7; ++i) {
    HistoryRow h;
    h.op = "allocate";
    h.tenant_id = i % 2 == 0 ? a : b;
    history.push_back(MustWrite([&](Txn& t) { return t.AppendHistory(h); }));
    TaskRow task = PendingTask(h.tenant_id.value(), "t" + std::to_string(i));
    tasks.push_back(MustWrite([&](Txn& t) { return t.InsertTask(task); }).id);
    if (i % 2 == 0) tasks_of_a.push_back(tasks.back());
  }
  // Pages of 3 from the beginning, each from the last row's position:
  // every row once, positions rising (committed one after the other, the
  // rows also rise in id).
  auto walk = [&](auto list, auto filter) {
    std::vector<RowId> ids;
    std::optional<ListPosition> last;
    filter.after.emplace();
    filter.limit = 3;
    for (int pages = 0; pages < 10; ++pages) {
      const auto page = MustRead([&](Txn& t) { return list(t, filter); });
      EXPECT_LE(page.size(), 3u);
      if (page.empty()) break;
      for (const auto& row : page) {
        if (last) {
          EXPECT_LT(*last, row.position()) << row.id;
        }
        last = row.position();
        ids.push_back(row.id);
      }
      filter.after = page.back().position();
    }
    return ids;
  };
  auto list_history = [](Txn& t, const HistoryFilter& f) {
    return t.ListHistory(f);
  };
  auto list_tasks = [](Txn& t, const TaskFilter& f) { return t.ListTasks(f); };
  EXPECT_EQ(walk(list_history, HistoryFilter{}), history);
  EXPECT_EQ(walk(list_tasks, TaskFilter{}), tasks);
  TaskFilter of_a;
  of_a.tenant_id = a;
  EXPECT_EQ(walk(list_tasks, of_a), tasks_of_a);
  // A row read any other way has the position the pages give it.
  const TaskRow got = MustRead([&](Txn& t) { return t.GetTask(tasks[3]); });
  TaskFilter from;
  from.after = got.position();
  const std::vector<TaskRow> rest =
      MustRead([&](Txn& t) { return t.ListTasks(from); });
  EXPECT_EQ(IdsOf(rest), std::vector<RowId>(tasks.begin() + 4, tasks.end()));
}

// --------------------------------------------------------- slice requests

TEST_P(StoreContractTest, SliceRequestsInsertGetUpdate) {
  const RowId tenant = AddTenant("t");
  const RowId node = AddNode("n");
  const RowId task = AddTask(tenant, "job");
  SliceRequestRow in;
  in.node_id = node;
  in.slice_id = 31;
  in.task_id = task;
  in.action = "create";
  in.gpu_index = 2;
  in.gpu_uuid = "GPU-abc";
  in.profile = "1g.10gb";
  in.mig_start = 3;
  in.created_at = 100;
  in.deadline_at = 60100;
  const SliceRequestRow stored =
      MustWrite([&](Txn& t) { return t.InsertSliceRequest(in); });
  EXPECT_GT(stored.id, 0);
  in.id = stored.id;
  EXPECT_EQ(Fields(stored), Fields(in));
  EXPECT_EQ(Fields(MustRead([&](Txn& t) { return t.GetSliceRequest(in.id); })),
            Fields(in));

  SliceRequestRow done = in;
  done.state = SliceRequestState::kDone;
  done.device_id = "MIG-9a";
  done.error = "none \"really\"";
  done.claimed_at = 200;
  done.finished_at = 300;
  ASSERT_TRUE(
      WriteStatus([&](Txn& t) { return t.UpdateSliceRequest(done); }).ok());
  EXPECT_EQ(Fields(MustRead([&](Txn& t) { return t.GetSliceRequest(in.id); })),
            Fields(done));

  done.id = 999;
  EXPECT_TRUE(
      HasCode(WriteStatus([&](Txn& t) { return t.UpdateSliceRequest(done); }),
              StatusCode::kNotFound));
  EXPECT_TRUE(
      HasCode(TryRead([](Txn& t) { return t.GetSliceRequest(999); }).status(),
              StatusCode::kNotFound));
  in.node_id = 999;
  EXPECT_TRUE(HasCode(
      TryWrite([&](Txn& t) { return t.InsertSliceRequest(in); }).status(),
      StatusCode::kNotFound));
}

TEST_P(StoreContractTest, ListSliceRequestsFiltersAndPages) {
  const RowId n1 = AddNode("n1");
  const RowId n2 = AddNode("n2");
  const SliceRequestState states[] = {
      SliceRequestState::kPending, SliceRequestState::kClaimed,
      SliceRequestState::kDone, SliceRequestState::kFailed,
      SliceRequestState::kStuck};
  std::vector<SliceRequestRow> rows;
  for (int i = 0; i < 10; ++i) {
    SliceRequestRow r;
    r.node_id = i < 6 ? n1 : n2;
    r.slice_id = i + 1;
    r.action = i % 2 == 0 ? "create" : "destroy";
    r.state = states[i % 5];
    rows.push_back(MustWrite([&](Txn& t) { return t.InsertSliceRequest(r); }));
  }
  auto list = [&](SliceRequestFilter f) {
    return IdsOf(MustRead([&](Txn& t) { return t.ListSliceRequests(f); }));
  };
  SliceRequestFilter f;
  EXPECT_EQ(list(f), IdsOf(rows));
  f.node_id = n1;
  f.state = SliceRequestState::kPending;
  EXPECT_EQ(list(f), (std::vector<RowId>{rows[0].id, rows[5].id}));
  f.node_id = n2;
  EXPECT_TRUE(list(f).empty());
  f = {};
  f.state = SliceRequestState::kStuck;
  EXPECT_EQ(list(f), (std::vector<RowId>{rows[4].id, rows[9].id}));
  f = {};
  f.node_id = n2;
  f.after_id = rows[6].id;
  f.limit = 2;
  EXPECT_EQ(list(f), (std::vector<RowId>{rows[7].id, rows[8].id}));
}

// ------------------------------------------------------------------- meta

TEST_P(StoreContractTest, MetaGetSetOverwrite) {
  EXPECT_EQ(MustRead([](Txn& t) { return t.GetMeta("admin_bootstrapped"); }),
            std::nullopt);
  ASSERT_TRUE(WriteStatus([](Txn& t) {
                return t.SetMeta("admin_bootstrapped", "1");
              }).ok());
  ASSERT_TRUE(
      WriteStatus([](Txn& t) { return t.SetMeta("motd", Awkward()); }).ok());
  EXPECT_EQ(MustRead([](Txn& t) { return t.GetMeta("admin_bootstrapped"); }),
            std::optional<std::string>("1"));
  ASSERT_TRUE(WriteStatus([](Txn& t) {
                return t.SetMeta("admin_bootstrapped", "2");
              }).ok());
  EXPECT_EQ(MustRead([](Txn& t) { return t.GetMeta("admin_bootstrapped"); }),
            std::optional<std::string>("2"));
  EXPECT_EQ(MustRead([](Txn& t) { return t.GetMeta("motd"); }),
            std::optional<std::string>(Awkward()));
}

// ------------------------------------------------------ idempotency keys

inline IdempotencyRow PendingKey(RowId token_id, const std::string& key,
                                 Millis expires_at = 1'000'000) {
  IdempotencyRow r;
  r.token_id = token_id;
  r.key = key;
  r.fingerprint = "fp-" + key;
  r.created_at = 1'000;
  r.expires_at = expires_at;
  return r;
}

TEST_P(StoreContractTest, IdempotencyKeysInsertGetUpdateDelete) {
  const IdempotencyRow pending = PendingKey(7, "k-1");
  ASSERT_TRUE(WriteStatus([&](Txn& t) {
                return t.InsertIdempotencyKey(pending);
              }).ok());
  EXPECT_EQ(
      Fields(MustRead([](Txn& t) { return t.GetIdempotencyKey(7, "k-1"); })),
      Fields(pending));
  // The pair is unique; the same key of another token is another row.
  EXPECT_TRUE(HasCode(
      WriteStatus([&](Txn& t) { return t.InsertIdempotencyKey(pending); }),
      StatusCode::kAlreadyExists));
  IdempotencyRow other = PendingKey(8, "k-1");
  other.fingerprint = "another";
  ASSERT_TRUE(
      WriteStatus([&](Txn& t) { return t.InsertIdempotencyKey(other); }).ok());
  EXPECT_EQ(MustRead([](Txn& t) {
              return t.GetIdempotencyKey(8, "k-1");
            }).fingerprint,
            "another");
  EXPECT_TRUE(HasCode(
      TryRead([](Txn& t) { return t.GetIdempotencyKey(7, "k-2"); }).status(),
      StatusCode::kNotFound));

  // Finished: the reply is recorded, every byte of it.
  IdempotencyRow done = pending;
  done.status = 201;
  done.body = Awkward();
  done.task_id = 42;
  done.expires_at = 2'000'000;
  ASSERT_TRUE(
      WriteStatus([&](Txn& t) { return t.UpdateIdempotencyKey(done); }).ok());
  EXPECT_EQ(
      Fields(MustRead([](Txn& t) { return t.GetIdempotencyKey(7, "k-1"); })),
      Fields(done));
  EXPECT_TRUE(HasCode(WriteStatus([&](Txn& t) {
                        return t.UpdateIdempotencyKey(PendingKey(7, "k-2"));
                      }),
                      StatusCode::kNotFound));

  // Deleted, idempotently; the other token's row stays.
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(WriteStatus([](Txn& t) {
                  return t.DeleteIdempotencyKey(7, "k-1");
                }).ok());
  }
  EXPECT_TRUE(HasCode(
      TryRead([](Txn& t) { return t.GetIdempotencyKey(7, "k-1"); }).status(),
      StatusCode::kNotFound));
  EXPECT_TRUE(
      TryRead([](Txn& t) { return t.GetIdempotencyKey(8, "k-1"); }).ok());
}

TEST_P(StoreContractTest, ExpiredIdempotencyKeysAreSweptInBatches) {
  for (int i = 1; i <= 5; ++i) {
    const IdempotencyRow row = PendingKey(1, "k" + std::to_string(i), i * 10);
    ASSERT_TRUE(
        WriteStatus([&](Txn& t) { return t.InsertIdempotencyKey(row); }).ok());
  }
  // Expired at 30: k1, k2, k3 (expires_at <= now), two at most per batch.
  EXPECT_EQ(
      MustWrite([](Txn& t) { return t.DeleteExpiredIdempotencyKeys(30, 2); }),
      2);
  EXPECT_EQ(
      MustWrite([](Txn& t) { return t.DeleteExpiredIdempotencyKeys(30, 2); }),
      1);
  EXPECT_EQ(
      MustWrite([](Txn& t) { return t.DeleteExpiredIdempotencyKeys(30, 2); }),
      0);
  for (int i = 1; i <= 5; ++i) {
    const std::string key = "k" + std::to_string(i);
    EXPECT_EQ(TryRead([&](Txn& t) { return t.GetIdempotencyKey(1, key); }).ok(),
              i > 3)
        << key;
  }
  EXPECT_TRUE(HasCode(TryWrite([](Txn& t) {
                        return t.DeleteExpiredIdempotencyKeys(100, 0);
                      }).status(),
                      StatusCode::kInternal));
}

// ---------------------------------------------------------------- batches
// UpdateTasks, InsertSlices, AppendHistories and InsertSliceRequests: the
// same rows and answers as the single-row calls one by one.

TEST_P(StoreContractTest, UpdateTasksIsACompareAndSetPerRow) {
  const RowId tenant = AddTenant("t");
  const RowId node = AddNode("n");
  // Pairs of equal tasks: one of each updated by UpdateTask, the other in
  // the batch, to compare what each stores.
  constexpr int kPairs = 40;
  std::vector<TaskRow> single;
  std::vector<TaskRow> batched;
  for (int i = 0; i < kPairs; ++i) {
    for (auto* rows : {&single, &batched}) {
      rows->push_back(MustWrite([&](Txn& t) {
        return t.InsertTask(PendingTask(tenant, "job-" + std::to_string(i)));
      }));
    }
  }
  // Where each stands in a client's list (set when it is read back).
  std::vector<ListPosition> positions;
  for (const TaskRow& row : batched) {
    positions.push_back(
        MustRead([&](Txn& t) { return t.GetTask(row.id); }).position());
  }
  // The one row the batch must not write: a claim lost since it was read.
  TaskRow& moved = batched[7];
  TaskRow moved_on = moved;
  moved_on.message = "cancelled meanwhile";
  moved_on = MustWrite([&](Txn& t) { return t.UpdateTask(moved_on); });

  const auto change = [&](TaskRow row, int i) {
    const RowId id = row.id;
    const std::int64_t version = row.version;
    const Millis created_at = row.created_at;
    if (i % 2 == 0) {
      row = FullTask(tenant, node);  // every field, awkward text included
      row.id = id;
      row.version = version;
      row.created_at = created_at;
    }
    row.state = TaskState::kScheduled;
    row.slice_id = 100 + i;
    row.node_id = node;
    row.gpu_indices = {i % 8};
    row.env["HETEROFLOW_SLICE_ID"] = std::to_string(100 + i);
    row.pending_reason.clear();
    row.updated_at = 5000 + i;
    return row;
  };
  std::vector<TaskRow> want_single;
  std::vector<TaskRow> want_batched;
  for (int i = 0; i < kPairs; ++i) {
    want_single.push_back(change(single[i], i));
    want_batched.push_back(change(batched[i], i));
  }
  TaskRow ghost = want_batched[0];
  ghost.id = 99'999;
  std::vector<TaskRow> batch = want_batched;
  batch.push_back(ghost);

  const std::vector<StatusOr<TaskRow>> got =
      MustWrite([&](Txn& t) -> StatusOr<std::vector<StatusOr<TaskRow>>> {
        for (const TaskRow& row : want_single) {
          HF_RETURN_IF_ERROR(t.UpdateTask(row).status());
        }
        return t.UpdateTasks(batch);
      });
  ASSERT_EQ(got.size(), batch.size());
  for (int i = 0; i < kPairs; ++i) {
    SCOPED_TRACE("row " + std::to_string(i));
    if (i == 7) {
      EXPECT_TRUE(HasCode(got[i].status(), StatusCode::kAborted));
      continue;
    }
    ASSERT_TRUE(got[i].ok()) << got[i].status().ToString();
    TaskRow expected = want_batched[i];
    expected.version = batched[i].version + 1;
    EXPECT_EQ(Fields(*got[i]), Fields(expected));
  }
  EXPECT_TRUE(HasCode(got.back().status(), StatusCode::kNotFound));
  EXPECT_NE(got.back().status().message().find("task 99999"), std::string::npos)
      << got.back().status().message();

  // Stored as UpdateTask stores them (the version bumped once, the list
  // position kept); the lost claim's row untouched.
  for (int i = 0; i < kPairs; ++i) {
    SCOPED_TRACE("row " + std::to_string(i));
    const TaskRow one =
        MustRead([&](Txn& t) { return t.GetTask(single[i].id); });
    const TaskRow two =
        MustRead([&](Txn& t) { return t.GetTask(batched[i].id); });
    if (i == 7) {
      EXPECT_EQ(Fields(two), Fields(moved_on));
      continue;
    }
    EXPECT_EQ(two.version, batched[i].version + 1);
    EXPECT_EQ(two.position(), positions[i]);
    TaskRow same = one;
    same.id = two.id;
    same.txn = two.txn;
    EXPECT_EQ(Fields(two), Fields(same));
  }
}

TEST_P(StoreContractTest, UpdateTasksChecksATaskTwiceInOneBatchInOrder) {
  const RowId tenant = AddTenant("t");
  const TaskRow task = MustWrite(
      [&](Txn& t) { return t.InsertTask(PendingTask(tenant, "job")); });
  TaskRow first = task;
  first.message = "first";
  TaskRow again = first;  // the same version: loses to the first
  again.message = "again";
  TaskRow next = first;  // the version the first stores: wins
  next.version = task.version + 1;
  next.message = "next";
  const std::vector<TaskRow> batch = {first, again, next};
  const std::vector<StatusOr<TaskRow>> got =
      MustWrite([&](Txn& t) { return t.UpdateTasks(batch); });
  ASSERT_EQ(got.size(), 3u);
  EXPECT_TRUE(got[0].ok());
  EXPECT_TRUE(HasCode(got[1].status(), StatusCode::kAborted));
  ASSERT_TRUE(got[2].ok()) << got[2].status().ToString();
  EXPECT_EQ(got[2]->version, task.version + 2);
  const TaskRow stored = MustRead([&](Txn& t) { return t.GetTask(task.id); });
  EXPECT_EQ(stored.message, "next");
  EXPECT_EQ(stored.version, task.version + 2);
}

TEST_P(StoreContractTest, BatchInsertsStoreWhatTheSingleRowCallsStore) {
  const RowId tenant = AddTenant("t");
  const RowId node = AddNode("n");
  const RowId task = AddTask(tenant, "job");
  // History written before the batch: the batch's rows come after it.
  HistoryRow before;
  before.op = "gc";
  const RowId before_id =
      MustWrite([&](Txn& t) { return t.AppendHistory(before); });

  std::vector<SliceRow> slices;
  for (int i = 0; i < 30; ++i) {
    SliceRow s = MakeSlice(1'000'000'000 + i, tenant, node, {i % 8});
    s.task_id = task;
    if (i % 3 == 0) {
      s.task_id.reset();  // an operator reservation
      s.released_at = 3000 + i;
      s.enforcement = {"mps", Awkward()};
      s.mig_device_id = "MIG-\"x\"";
      s.mig_profile = "1g.10gb";
      s.mig_start = i % 7;
      s.compute_defaulted = true;
      s.qos_level = "gold";
    }
    slices.push_back(s);
  }
  std::vector<HistoryRow> history;
  for (int i = 0; i < 30; ++i) {
    HistoryRow h;
    h.at = 123'000 + i;
    h.op = "allocate";
    h.slice_id = slices[i].id;
    h.task_id = slices[i].task_id;
    h.tenant_id = tenant;
    if (i % 2 == 0) h.node_id = node;
    h.gpu_indices = slices[i].gpu_indices;
    h.memory_mib = 4096;
    h.compute_percent = i;
    h.actor = "scheduler";
    h.reason = i % 5 == 0 ? "bound \"it\" {a,b} NULL\n" + Awkward() : "";
    history.push_back(h);
  }
  std::vector<SliceRequestRow> requests;
  for (int i = 0; i < 3; ++i) {
    SliceRequestRow r;
    r.node_id = node;
    r.slice_id = slices[i].id;
    r.task_id = i == 1 ? std::nullopt : std::optional<RowId>(task);
    r.action = "create";
    r.gpu_index = i;
    r.gpu_uuid = "GPU-" + std::to_string(i);
    r.profile = "1g.10gb";
    r.mig_start = i == 2 ? -1 : i;
    r.created_at = 100;
    r.deadline_at = 60'100;
    requests.push_back(r);
  }

  struct Out {
    std::vector<RowId> history_ids;
    std::vector<SliceRequestRow> requests;
  };
  const Out out = MustWrite([&](Txn& t) -> StatusOr<Out> {
    Out o;
    HF_RETURN_IF_ERROR(t.InsertSlices(slices));
    auto ids = t.AppendHistories(history);
    if (!ids.ok()) return ids.status();
    o.history_ids = *std::move(ids);
    auto stored = t.InsertSliceRequests(requests);
    if (!stored.ok()) return stored.status();
    o.requests = *std::move(stored);
    return o;
  });

  for (const SliceRow& s : slices) {
    EXPECT_EQ(Fields(MustRead([&](Txn& t) { return t.GetSlice(s.id); })),
              Fields(s));
  }
  ASSERT_EQ(out.history_ids.size(), history.size());
  HistoryFilter f;
  f.after_id = before_id;
  f.limit = 1000;
  const std::vector<HistoryRow> listed =
      MustRead([&](Txn& t) { return t.ListHistory(f); });
  ASSERT_EQ(listed.size(), history.size());
  for (std::size_t i = 0; i < history.size(); ++i) {
    SCOPED_TRACE("history row " + std::to_string(i));
    HistoryRow expected = history[i];
    expected.id = out.history_ids[i];  // in order, increasing
    EXPECT_EQ(Fields(listed[i]), Fields(expected));
    EXPECT_EQ(listed[i].txn, listed[0].txn) << "one transaction";
  }
  ASSERT_EQ(out.requests.size(), requests.size());
  for (std::size_t i = 0; i < requests.size(); ++i) {
    SliceRequestRow expected = requests[i];
    expected.id = out.requests[i].id;
    EXPECT_GT(expected.id, i == 0 ? 0 : out.requests[i - 1].id);
    EXPECT_EQ(Fields(out.requests[i]), Fields(expected));
    EXPECT_EQ(Fields(MustRead(
                  [&](Txn& t) { return t.GetSliceRequest(expected.id); })),
              Fields(expected));
  }
  // A client's page of the history finds them after the earlier row.
  HistoryFilter page;
  page.after = ListPosition{};
  page.limit = 1000;
  const std::vector<HistoryRow> paged =
      MustRead([&](Txn& t) { return t.ListHistory(page); });
  ASSERT_EQ(paged.size(), 1 + history.size());
  EXPECT_EQ(paged.front().id, before_id);

  // Empty batches do nothing.
  const Status empty = WriteStatus([](Txn& t) -> Status {
    auto updated = t.UpdateTasks({});
    if (!updated.ok()) return updated.status();
    if (!updated->empty()) return Status::Internal("rows from nothing");
    HF_RETURN_IF_ERROR(t.InsertSlices({}));
    auto ids = t.AppendHistories({});
    if (!ids.ok()) return ids.status();
    if (!ids->empty()) return Status::Internal("ids from nothing");
    auto stored = t.InsertSliceRequests({});
    if (!stored.ok()) return stored.status();
    if (!stored->empty()) return Status::Internal("requests from nothing");
    return Status::Ok();
  });
  EXPECT_TRUE(empty.ok()) << empty.ToString();
}

TEST_P(StoreContractTest, ABatchRefusedMidwayLeavesNothingOfTheWrite) {
  const RowId tenant = AddTenant("t");
  const RowId node = AddNode("n");
  const TaskRow task = MustWrite(
      [&](Txn& t) { return t.InsertTask(PendingTask(tenant, "job")); });
  ASSERT_TRUE(WriteStatus([&](Txn& t) {
                return t.InsertSlice(MakeSlice(5, tenant, node, {0}));
              }).ok());
  const auto history = [&] {
    return MustRead([](Txn& t) { return t.ListHistory(HistoryFilter{}); })
        .size();
  };
  const std::size_t history_before = history();
  const auto bind = [&](std::vector<SliceRow> slices) {
    return WriteStatus([&](Txn& t) -> Status {
      TaskRow next = task;
      next.state = TaskState::kScheduled;
      auto updated = t.UpdateTasks(std::vector<TaskRow>{next});
      if (!updated.ok()) return updated.status();
      HF_RETURN_IF_ERROR(updated->front().status());
      HistoryRow h;
      h.op = "allocate";
      HF_RETURN_IF_ERROR(
          t.AppendHistories(std::vector<HistoryRow>{h, h}).status());
      return t.InsertSlices(slices);  // the error is the function's
    });
  };
  // A duplicate id between two new slices, then a missing node.
  EXPECT_TRUE(HasCode(
      bind({MakeSlice(6, tenant, node, {1}), MakeSlice(5, tenant, node, {1}),
            MakeSlice(7, tenant, node, {2})}),
      StatusCode::kAlreadyExists));
  EXPECT_TRUE(HasCode(
      bind({MakeSlice(6, tenant, node, {1}), MakeSlice(7, tenant, 999, {2})}),
      StatusCode::kNotFound));
  for (const RowId id : {RowId{6}, RowId{7}}) {
    EXPECT_TRUE(
        HasCode(TryRead([&](Txn& t) { return t.GetSlice(id); }).status(),
                StatusCode::kNotFound))
        << "slice " << id;
  }
  const TaskRow after = MustRead([&](Txn& t) { return t.GetTask(task.id); });
  EXPECT_EQ(Fields(after), Fields(task));
  EXPECT_EQ(history(), history_before);
  // ...and the same Write with good rows is kept whole.
  ASSERT_TRUE(bind({MakeSlice(6, tenant, node, {1})}).ok());
  EXPECT_EQ(MustRead([&](Txn& t) { return t.GetTask(task.id); }).version,
            task.version + 1);
  EXPECT_EQ(history(), history_before + 2);
}

// ------------------------------------------------------------ transactions

TEST_P(StoreContractTest, FailedWriteKeepsNothingAndReturnsItsStatus) {
  const RowId tenant = AddTenant("t");
  const Status refused = Status::FailedPrecondition("changed my mind");
  const Status status = WriteStatus([&](Txn& t) {
    GroupRow g;
    g.name = "ghost";
    HF_RETURN_IF_ERROR(t.InsertGroup(g).status());
    HF_RETURN_IF_ERROR(t.InsertTask(PendingTask(tenant, "ghost")).status());
    HF_RETURN_IF_ERROR(t.SetMeta("ghost", "1"));
    return Status(refused);
  });
  EXPECT_EQ(status, refused);
  EXPECT_TRUE(MustRead([](Txn& t) { return t.ListGroups(); }).empty());
  EXPECT_EQ(MustRead([](Txn& t) { return t.MaxTaskId(); }), 0);
  EXPECT_EQ(MustRead([](Txn& t) { return t.GetMeta("ghost"); }), std::nullopt);

  // A failed step inside a Write the function then abandons leaves the
  // earlier steps of that Write out too.
  const Status dup = WriteStatus([&](Txn& t) {
    TenantRow again;
    again.name = "fresh";
    HF_RETURN_IF_ERROR(t.InsertTenant(again).status());
    again.name = "t";  // taken
    return t.InsertTenant(again).status();
  });
  EXPECT_TRUE(HasCode(dup, StatusCode::kAlreadyExists));
  EXPECT_TRUE(
      HasCode(TryRead([](Txn& t) { return t.FindTenant("fresh"); }).status(),
              StatusCode::kNotFound));
}

TEST_P(StoreContractTest, FailedWritesDoNotDisturbConcurrentOnes) {
  // The first write takes its name, then holds its transaction open for a
  // moment, so the ones behind it queue up (a single writer; with group
  // commit they share one transaction) or run beside it (several writer
  // connections: one that wants the same name waits for it).
  std::atomic<bool> holding{false};
  std::thread holder([&] {
    EXPECT_TRUE(WriteStatus([&](Txn& t) {
                  TenantRow r;
                  r.name = "holder";
                  HF_RETURN_IF_ERROR(t.InsertTenant(r).status());
                  holding = true;
                  std::this_thread::sleep_for(std::chrono::milliseconds(200));
                  return Status::Ok();
                }).ok());
  });
  while (!holding) std::this_thread::yield();

  // Five kinds of writer, three of each. Their order in the queue is up to
  // the scheduler, so each expectation holds in any order.
  constexpr int kKinds = 5;
  constexpr int kWriters = 3 * kKinds;
  std::vector<Status> results(kWriters);
  std::vector<std::thread> writers;
  writers.reserve(kWriters);
  for (int i = 0; i < kWriters; ++i) {
    writers.emplace_back([&, i] {
      results[i] = WriteStatus([&, i](Txn& t) -> Status {
        TenantRow r;
        switch (i % kKinds) {
          case 0:  // succeeds
            r.name = "good-" + std::to_string(i);
            return t.InsertTenant(r).status();
          case 1:  // changes something, then fails
            r.name = "bad-" + std::to_string(i);
            HF_RETURN_IF_ERROR(t.InsertTenant(r).status());
            HF_RETURN_IF_ERROR(t.SetMeta("bad-" + std::to_string(i), "x"));
            return Status::FailedPrecondition("refused " + std::to_string(i));
          case 2:  // collides with the holder's row
            r.name = "holder";
            return t.InsertTenant(r).status();
          case 3:  // takes a name its partner (i + 1) wants, then fails
            r.name = "contested-" + std::to_string(i);
            HF_RETURN_IF_ERROR(t.InsertTenant(r).status());
            return Status::Aborted("dropping " + std::to_string(i));
          default:  // must get the name whether or not its partner ran first
            r.name = "contested-" + std::to_string(i - 1);
            return t.InsertTenant(r).status();
        }
      });
    });
  }
  for (std::thread& w : writers) w.join();
  holder.join();

  std::set<std::string> names;
  for (const TenantRow& t : MustRead([](Txn& t) { return t.ListTenants(); })) {
    names.insert(t.name);
  }
  for (int i = 0; i < kWriters; ++i) {
    SCOPED_TRACE("writer " + std::to_string(i));
    switch (i % kKinds) {
      case 0:
        EXPECT_TRUE(results[i].ok()) << results[i].ToString();
        EXPECT_TRUE(names.count("good-" + std::to_string(i)));
        break;
      case 1:
        EXPECT_EQ(results[i],
                  Status::FailedPrecondition("refused " + std::to_string(i)))
            << results[i].ToString();
        EXPECT_EQ(MustRead([&](Txn& t) {
                    return t.GetMeta("bad-" + std::to_string(i));
                  }),
                  std::nullopt);
        break;
      case 2:
        EXPECT_TRUE(HasCode(results[i], StatusCode::kAlreadyExists));
        break;
      case 3:  // its own failure, or the name was already taken
        EXPECT_TRUE(results[i] ==
                        Status::Aborted("dropping " + std::to_string(i)) ||
                    results[i].code() == StatusCode::kAlreadyExists)
            << results[i].ToString();
        break;
      default:
        EXPECT_TRUE(results[i].ok()) << results[i].ToString();
        EXPECT_TRUE(names.count("contested-" + std::to_string(i - 1)));
        break;
    }
  }
  // The holder, the good ones and the contested names; no "bad-*".
  EXPECT_TRUE(names.count("holder"));
  EXPECT_EQ(names.size(), 1u + 2 * (kWriters / kKinds));
}

TEST_P(StoreContractTest, ReadTransactionRejectsEveryMutation) {
  const RowId tenant = AddTenant("t");
  const RowId node = AddNode("n");
  const RowId task_id = AddTask(tenant, "job");
  ASSERT_TRUE(WriteStatus([&](Txn& t) {
                return t.InsertSlice(MakeSlice(1, tenant, node, {0}));
              }).ok());
  GroupRow group;
  group.name = "g";
  const RowId group_id =
      MustWrite([&](Txn& t) { return t.InsertGroup(group); }).id;
  TokenRow token;
  token.hash = "h";
  const RowId token_id =
      MustWrite([&](Txn& t) { return t.InsertToken(token); }).id;
  SliceRequestRow request;
  request.node_id = node;
  request.slice_id = 1;
  request.action = "create";
  request = MustWrite([&](Txn& t) { return t.InsertSliceRequest(request); });
  const TaskRow task = MustRead([&](Txn& t) { return t.GetTask(task_id); });

  const std::vector<std::pair<std::string, std::function<Status(Txn&)>>>
      mutations = {
          {"InsertGroup",
           [](Txn& t) {
             GroupRow g;
             g.name = "new";
             return t.InsertGroup(g).status();
           }},
          {"InsertTenant",
           [](Txn& t) {
             TenantRow r;
             r.name = "new";
             return t.InsertTenant(r).status();
           }},
          {"SetTenantGroup",
           [&](Txn& t) { return t.SetTenantGroup(tenant, group_id); }},
          {"DeleteGroup", [&](Txn& t) { return t.DeleteGroup(group_id); }},
          {"InsertToken",
           [](Txn& t) {
             TokenRow r;
             r.hash = "new";
             return t.InsertToken(r).status();
           }},
          {"RevokeToken", [&](Txn& t) { return t.RevokeToken(token_id, 1); }},
          {"UpsertNode",
           [](Txn& t) {
             NodeRow r;
             r.name = "new";
             return t.UpsertNode(r).status();
           }},
          {"UpsertGpu",
           [&](Txn& t) {
             GpuRow r;
             r.node_id = node;
             return t.UpsertGpu(r).status();
           }},
          {"InsertTask",
           [&](Txn& t) {
             return t.InsertTask(PendingTask(tenant, "new")).status();
           }},
          {"UpdateTask", [&](Txn& t) { return t.UpdateTask(task).status(); }},
          {"InsertSlice",
           [&](Txn& t) {
             return t.InsertSlice(MakeSlice(2, tenant, node, {0}));
           }},
          {"UpdateSlice",
           [&](Txn& t) {
             return t.UpdateSlice(MakeSlice(1, tenant, node, {1}));
           }},
          {"AppendHistory",
           [](Txn& t) { return t.AppendHistory(HistoryRow{}).status(); }},
          {"InsertSliceRequest",
           [&](Txn& t) { return t.InsertSliceRequest(request).status(); }},
          {"UpdateSliceRequest",
           [&](Txn& t) { return t.UpdateSliceRequest(request); }},
          {"SetMeta", [](Txn& t) { return t.SetMeta("k", "v"); }},
          {"UpdateTasks",
           [&](Txn& t) {
             return t.UpdateTasks(std::vector<TaskRow>{task}).status();
           }},
          {"InsertSlices",
           [&](Txn& t) {
             return t.InsertSlices(
                 std::vector<SliceRow>{MakeSlice(3, tenant, node, {0})});
           }},
          {"AppendHistories",
           [](Txn& t) {
             return t.AppendHistories(std::vector<HistoryRow>{HistoryRow{}})
                 .status();
           }},
          {"InsertSliceRequests",
           [&](Txn& t) {
             return t.InsertSliceRequests(std::vector<SliceRequestRow>{request})
                 .status();
           }},
          {"InsertIdempotencyKey",
           [](Txn& t) {
             return t.InsertIdempotencyKey(PendingKey(1, "read-only"));
           }},
          {"UpdateIdempotencyKey",
           [](Txn& t) {
             return t.UpdateIdempotencyKey(PendingKey(1, "read-only"));
           }},
          {"DeleteIdempotencyKey",
           [](Txn& t) { return t.DeleteIdempotencyKey(1, "read-only"); }},
          {"DeleteExpiredIdempotencyKeys",
           [](Txn& t) {
             return t.DeleteExpiredIdempotencyKeys(0, 10).status();
           }},
      };
  for (const auto& mutation : mutations) {
    const std::string& name = mutation.first;
    const std::function<Status(Txn&)>& mutate = mutation.second;
    SCOPED_TRACE(name);
    Status inner;
    const Status outer = store_->Read([&](Txn& t) {
      inner = mutate(t);
      return Status::Ok();
    });
    EXPECT_TRUE(outer.ok()) << outer.ToString();
    EXPECT_TRUE(HasCode(inner, StatusCode::kInternal));
    // ...and the same function works in a Write.
    EXPECT_TRUE(WriteStatus(mutate).ok()) << name;
  }
}

TEST_P(StoreContractTest, ReadSeesOneSnapshot) {
  AddTenant("before");
  Status during;
  const Status read = store_->Read([&](Txn& t) -> Status {
    StatusOr<std::vector<TenantRow>> first = t.ListTenants();
    HF_RETURN_IF_ERROR(first.status());
    // Another thread commits while this transaction is open.
    std::thread writer([&] {
      during = WriteStatus([](Txn& w) {
        TenantRow r;
        r.name = "during";
        return w.InsertTenant(r).status();
      });
    });
    writer.join();
    StatusOr<std::vector<TenantRow>> second = t.ListTenants();
    HF_RETURN_IF_ERROR(second.status());
    EXPECT_EQ(first->size(), 1u);
    EXPECT_EQ(second->size(), 1u);
    EXPECT_TRUE(
        HasCode(t.FindTenant("during").status(), StatusCode::kNotFound));
    return Status::Ok();
  });
  EXPECT_TRUE(read.ok()) << read.ToString();
  EXPECT_TRUE(during.ok()) << during.ToString();
  EXPECT_EQ(MustRead([](Txn& t) { return t.ListTenants(); }).size(), 2u);
}

TEST_P(StoreContractTest, ConcurrentWritesAreAllKeptWithDistinctIds) {
  const RowId tenant = AddTenant("t");
  constexpr int kThreads = 8;
  constexpr int kWritesPerThread = 300;
  std::vector<std::vector<RowId>> ids(kThreads);
  std::atomic<bool> writing{true};
  std::atomic<int> read_failures{0};

  // A reader alongside: the highest id only ever grows.
  std::thread reader([&] {
    RowId last = 0;
    while (writing) {
      StatusOr<RowId> max = TryRead([](Txn& t) { return t.MaxTaskId(); });
      if (!max.ok() || *max < last) ++read_failures;
      if (max.ok()) last = *max;
    }
  });
  std::vector<std::thread> writers;
  writers.reserve(kThreads);
  for (int w = 0; w < kThreads; ++w) {
    writers.emplace_back([&, w] {
      for (int i = 0; i < kWritesPerThread; ++i) {
        StatusOr<TaskRow> row = TryWrite([&](Txn& t) {
          return t.InsertTask(
              PendingTask(tenant, std::to_string(w) + "/" + std::to_string(i)));
        });
        if (!row.ok()) {
          ADD_FAILURE() << row.status().ToString();
          return;
        }
        ids[w].push_back(row->id);
      }
    });
  }
  for (std::thread& w : writers) w.join();
  writing = false;
  reader.join();
  EXPECT_EQ(read_failures.load(), 0);

  std::set<RowId> acknowledged;
  for (const auto& per_thread : ids) {
    EXPECT_EQ(per_thread.size(), static_cast<std::size_t>(kWritesPerThread));
    EXPECT_TRUE(std::is_sorted(per_thread.begin(), per_thread.end()));
    acknowledged.insert(per_thread.begin(), per_thread.end());
  }
  EXPECT_EQ(acknowledged.size(),
            static_cast<std::size_t>(kThreads * kWritesPerThread));

  std::set<RowId> stored;
  TaskFilter f;
  f.limit = 1000;
  for (;;) {
    const std::vector<TaskRow> page =
        MustRead([&](Txn& t) { return t.ListTasks(f); });
    if (page.empty()) break;
    for (const TaskRow& t : page) stored.insert(t.id);
    f.after_id = page.back().id;
  }
  EXPECT_EQ(stored, acknowledged);
}

}  // namespace hf::store::contract
