// Browser tests of the console (issue 7): the REAL hf-server and hf-agent
// (harness.mjs), Chromium through playwright-core. One platform for the
// file; each test opens its own browser context (sessionStorage is per
// context, so each is a fresh sign-in).
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { openBrowser, screenshot, startPlatform, waitFor } from "./harness.mjs";

let p;
let browser;
let userA; // user of tenant "ta"
let userB; // user of tenant "tb"
const sliceTaskName = "form-slice-task";

before(async () => {
  p = await startPlatform();
  await p.tenant("ta");
  await p.tenant("tb");
  userA = await p.token("user", "ta");
  userB = await p.token("user", "tb");
  ({ browser } = await openBrowser());
});

after(async () => {
  await browser?.close();
  await p?.stop();
});

// A fresh context and page; `errors` collects console and page errors.
// `expectedStatus` lists HTTP statuses whose "Failed to load resource"
// console line Chromium prints for a fetch the test provokes on purpose.
async function newPage({ width = 1366, height = 768, expectedStatus = [] } = {}) {
  const context = await browser.newContext({ viewport: { width, height } });
  const page = await context.newPage();
  const errors = [];
  page.on("console", (msg) => {
    if (msg.type() !== "error") return;
    const text = msg.text();
    if (expectedStatus.some((s) => text.includes(`status of ${s}`))) return;
    errors.push(`console: ${text}`);
  });
  page.on("pageerror", (err) => errors.push(`page: ${err.message}`));
  return { context, page, errors };
}

async function signIn(page, token) {
  await page.goto(p.url + "/");
  await page.fill("#signin-token", token);
  await page.click("button[type=submit]");
  await page.waitForSelector("[data-testid=whoami]");
}

async function go(page, hash) {
  await page.evaluate((h) => (location.hash = h), hash);
  await page.waitForFunction((h) => location.hash === h, hash);
  await page.waitForSelector("#page-title");
}

// The tier a GPU gives (docs/CONTRACT.md section 3), from the node's own report.
async function tierOf(nodeId, index) {
  const node = await p.api("GET", `/api/v1/nodes/${nodeId}`);
  const g = node.gpus.find((x) => x.index === index);
  if (node.containerized) return "bronze";
  return g.mig_capable ? "gold" : g.mps_capable ? "silver" : "bronze";
}

async function taskCount(token) {
  return (await p.api("GET", "/api/v1/tasks?limit=1000", undefined, token)).items.length;
}

test("sign in: a bad token is refused, admin and user see who they are", async () => {
  const { context, page, errors } = await newPage({ expectedStatus: [401] });
  await page.goto(p.url + "/");
  await screenshot(page, "signin");
  await page.fill("#signin-token", "not-a-real-token");
  await page.click("button[type=submit]");
  await page.waitForFunction(() => document.querySelector("#signin-error")?.textContent?.includes("token not accepted"));
  await page.fill("#signin-token", p.adminToken);
  await page.click("button[type=submit]");
  const who = await page.waitForSelector("[data-testid=whoami]");
  assert.match(await who.textContent(), /admin/);
  assert.ok(await page.$("nav a[href='#/admin']"), "admin sees the Admin entry");
  // Sign out returns to the sign-in form.
  await page.click("text=Sign out");
  await page.waitForSelector("#signin-token");
  await context.close();
  assert.deepEqual(errors, []);

  const u = await newPage();
  await signIn(u.page, userA);
  const text = await u.page.textContent("[data-testid=whoami]");
  assert.match(text, /user/);
  assert.match(text, /tenant ta/);
  assert.equal(await u.page.$("nav a[href='#/admin']"), null, "a user sees no Admin entry");
  assert.equal(await u.page.$("nav a[href='#/nodes']"), null, "a user sees no Nodes entry");
  await u.context.close();
  assert.deepEqual(u.errors, []);
});

test("invalid slice inputs are refused next to the field; nothing is created", async () => {
  const { context, page, errors } = await newPage();
  await signIn(page, userA);
  await go(page, "#/tasks/new");
  const before = await taskCount(userA);
  await page.fill("#task-name", "invalid");
  await page.fill("#task-command", "sleep 1");
  const cases = [
    ["memory", "0", /at least 32/],
    ["memory", "31", /at least 32/],
    ["memory", "33", /multiple of 32/],
    ["compute", "0", /between 1 and 100/],
    ["compute", "101", /between 1 and 100/],
    ["compute", "50.5", /whole percent/],
  ];
  for (const [field, value, msg] of cases) {
    await page.fill("#task-memory", field === "memory" ? value : "4096");
    await page.fill("#task-compute", field === "compute" ? value : "50");
    await page.locator(`#task-${field}`).blur();
    // Shown before submit, on input/blur.
    const shown = await page.textContent(`#task-${field}-error`);
    assert.match(shown, msg, `${field}=${value} explained before submit`);
    assert.equal(await page.getAttribute(`#task-${field}`, "aria-invalid"), "true");
    const other = field === "memory" ? "compute" : "memory";
    assert.equal((await page.textContent(`#task-${other}-error`)).trim(), "", `${other} is valid`);
    await page.click("button[type=submit]");
    await page.waitForFunction(() => document.querySelector("#task-form-error")?.textContent?.includes("Not submitted"));
    assert.equal(await page.evaluate(() => location.hash), "#/tasks/new", `${field}=${value} not submitted`);
    assert.match(await page.textContent(`#task-${field}-error`), msg);
  }
  await screenshot(page, "task-create");
  assert.equal(await taskCount(userA), before, "no task was created");
  await context.close();
  assert.deepEqual(errors, []);
});

test("a server-side 400 is shown next to the field it names", async () => {
  const { context, page, errors } = await newPage({ expectedStatus: [400] });
  await signIn(page, userA);
  await go(page, "#/tasks/new");
  const before = await taskCount(userA);
  await page.fill("#task-name", "reserved-env");
  await page.fill("#task-command", "sleep 1");
  await page.fill("#task-memory", "1024");
  // The form does not know the server's reserved variable names; the
  // server refuses them with {"error":"invalid_argument","field":"env.CUDA_VISIBLE_DEVICES"}.
  await page.fill("#task-env", "CUDA_VISIBLE_DEVICES=0");
  assert.equal((await page.textContent("#task-env-error")).trim(), "", "the client lets it through");
  await page.click("button[type=submit]");
  await page.waitForFunction(() => document.querySelector("#task-env-error")?.textContent?.includes("env.CUDA_VISIBLE_DEVICES"));
  assert.equal(await page.getAttribute("#task-env", "aria-invalid"), "true");
  assert.equal((await page.textContent("#task-memory-error")).trim(), "");
  assert.equal(await taskCount(userA), before);
  await context.close();
  assert.deepEqual(errors, []);
});

test("a slice task created through the form is allocated with its GPU's tier", async () => {
  const { context, page, errors } = await newPage();
  await signIn(page, userA);
  await go(page, "#/tasks");
  await page.click("a[href='#/tasks/new']");
  await page.waitForSelector("#task-name");
  await page.check("#mode-slice");
  await page.fill("#task-name", sliceTaskName);
  await page.fill("#task-command", "sleep 60");
  await page.fill("#task-memory", "4096");
  await page.fill("#task-compute", "50");
  await page.click("button[type=submit]");
  await page.waitForFunction(() => /^#\/tasks\/\d+$/.test(location.hash));
  const id = Number((await page.evaluate(() => location.hash)).split("/")[2]);
  const task = await waitFor("the task bound to a slice", async () => {
    const t = await p.api("GET", `/api/v1/tasks/${id}`);
    return t.slice_id ? t : null;
  });
  assert.equal(task.gpu_memory_mb, 4096);
  assert.equal(task.gpu_compute_percent, 50);
  assert.equal(task.tenant, "ta");
  const expected = await tierOf(task.node_id, task.gpu_indices[0]);
  await go(page, "#/slices");
  const row = page.locator(`tr[data-task-id="${id}"]`);
  await row.waitFor();
  assert.equal((await row.locator(".tier-cell").textContent()).trim(), expected);
  assert.match(await row.locator(".gpu-cell").textContent(), new RegExp(`${task.node_id} / ${task.gpu_indices[0]}`));
  // The GPU's card shows the same tier.
  const card = page.locator(`[data-gpu="${task.node_id}/${task.gpu_indices[0]}"]`);
  assert.equal((await card.locator(".tier").textContent()).trim(), expected);
  // The task's page has the slice's usage section; this node runs no hook,
  // so nothing is measured yet and the page says so.
  await go(page, `#/tasks/${id}`);
  const usage = page.locator("[data-testid=slice-usage]");
  await usage.waitFor();
  assert.match(await usage.textContent(), /No usage reported yet/);
  await context.close();
  assert.deepEqual(errors, []);
});

test("the compute mode select defaults to work-conserving and a strict task keeps strict", async () => {
  const { context, page, errors } = await newPage();
  await signIn(page, userA);
  await go(page, "#/tasks/new");
  await page.check("#mode-slice");
  // Both values, the default selected.
  const options = await page.$$eval("#task-computeMode option", (os) => os.map((o) => o.value));
  assert.deepEqual(options, ["work-conserving", "strict"]);
  assert.equal(await page.inputValue("#task-computeMode"), "work-conserving");
  // Whole GPUs ignore the mode: the form does not ask for it there.
  await page.check("#mode-whole");
  await page.waitForSelector("#task-gpus");
  assert.equal(await page.$("#task-computeMode"), null);
  await page.check("#mode-slice");
  await page.fill("#task-name", "form-strict-task");
  await page.fill("#task-command", "sleep 1");
  await page.fill("#task-memory", "1024");
  await page.fill("#task-compute", "25");
  await page.selectOption("#task-computeMode", "strict");
  await page.click("button[type=submit]");
  await page.waitForFunction(() => /^#\/tasks\/\d+$/.test(location.hash));
  const id = Number((await page.evaluate(() => location.hash)).split("/")[2]);
  const task = await waitFor("the strict task bound to a slice", async () => {
    const t = await p.api("GET", `/api/v1/tasks/${id}`);
    return t.slice_id ? t : null;
  });
  assert.equal(task.gpu_compute_mode, "strict");
  assert.equal(task.env.HETEROFLOW_SLICE_COMPUTE_MODE, "strict");
  assert.equal(task.env.HETEROFLOW_SLICE_COMPUTE_PERCENT, "25");
  await page.waitForSelector("[data-testid=compute-mode]");
  assert.equal((await page.textContent("[data-testid=compute-mode]")).trim(), "strict");
  // The task of the test before was sent with the default.
  const earlier = (await p.api("GET", "/api/v1/tasks?limit=1000", undefined, userA)).items.find((t) => t.name === sliceTaskName);
  assert.equal(earlier?.gpu_compute_mode, "work-conserving");
  await context.close();
  assert.deepEqual(errors, []);
});

test("a tenant user sees only its own tenant's slices", async () => {
  const b = await p.api("POST", "/api/v1/tasks", { name: "tb-task", command: "sleep 60", gpu_memory_mb: 1024 }, userB);
  await waitFor("tb's slice", async () => (await p.api("GET", `/api/v1/tasks/${b.id}`)).slice_id);
  const a = (await p.api("GET", "/api/v1/tasks?limit=1000", undefined, userA)).items.find((t) => t.name === sliceTaskName);
  assert.ok(a, "tenant ta's task exists");
  for (const [token, mine, theirs, tenant] of [
    [userA, a.id, b.id, "ta"],
    [userB, b.id, a.id, "tb"],
  ]) {
    const { context, page, errors } = await newPage();
    await signIn(page, token);
    await go(page, "#/slices");
    await page.locator(`tr[data-task-id="${mine}"]`).waitFor();
    assert.equal(await page.locator(`tr[data-task-id="${theirs}"]`).count(), 0, `${tenant} does not see the other's slice`);
    const tenants = await page.locator("td.tenant-cell").allTextContents();
    assert.ok(tenants.length > 0);
    assert.deepEqual([...new Set(tenants.map((t) => t.trim()))], [tenant]);
    const cardTenants = await page.locator(".gpu-card").allTextContents();
    for (const c of cardTenants) assert.doesNotMatch(c, new RegExp(`tenants: .*${tenant === "ta" ? "tb" : "ta"}`));
    await context.close();
    assert.deepEqual(errors, []);
  }
});

test("whole-GPU mode: a task through the form runs on a whole GPU", async () => {
  const { context, page, errors } = await newPage();
  await signIn(page, userA);
  await go(page, "#/tasks/new");
  await page.check("#mode-whole");
  await page.waitForSelector("#task-gpus");
  assert.equal(await page.$("#task-memory"), null, "no slice fields in whole-GPU mode");
  await page.fill("#task-name", "form-whole-task");
  await page.fill("#task-command", "echo hello from heteroflow; sleep 60");
  await page.fill("#task-gpus", "1");
  await page.fill("#task-env", "GREETING=hi");
  await page.click("button[type=submit]");
  await page.waitForFunction(() => /^#\/tasks\/\d+$/.test(location.hash));
  const id = Number((await page.evaluate(() => location.hash)).split("/")[2]);
  const task = await waitFor("the whole-GPU task running", async () => {
    const t = await p.api("GET", `/api/v1/tasks/${id}`);
    return t.status === "running" ? t : null;
  });
  assert.equal(task.gpu_required, 1);
  assert.equal(task.gpu_indices.length, 1);
  const slice = await p.api("GET", `/api/v1/slices/${task.slice_id}`);
  assert.equal(slice.kind, "whole");
  assert.equal(task.env.GREETING, "hi");
  // The detail page shows the state, env and (after a refresh) the logs.
  await page.waitForFunction(() => document.querySelector(".status")?.textContent === "running");
  await waitFor("the task's output in the logs", async () => {
    await page.click("text=Refresh logs");
    await new Promise((r) => setTimeout(r, 300));
    return (await page.textContent("[data-testid=logs]")).includes("hello from heteroflow");
  });
  assert.match(await page.textContent("main"), /GREETING/);
  await screenshot(page, "task-detail");
  // A whole GPU is exclusive, not a slice tier (issue 14): the task, its
  // slice row and its GPU's card say so.
  assert.equal(task.qos_level, "exclusive");
  assert.equal(slice.qos_level, "exclusive");
  assert.deepEqual(slice.enforcement, []);
  await go(page, "#/slices");
  const row = page.locator(`tr[data-slice-id="${slice.id}"]`);
  await row.waitFor();
  assert.equal((await row.locator(".tier-cell").textContent()).trim(), "exclusive");
  assert.match(await row.textContent(), /none needed \(exclusive\)/);
  const cardLocator = page.locator(`[data-gpu="${task.node_id}/${task.gpu_indices[0]}"]`);
  await cardLocator.waitFor();
  const card = await cardLocator.textContent();
  assert.match(card, /enforcement: exclusive/);
  assert.match(card, /no MIG, MPS or hook limit applies/);
  await context.close();
  assert.deepEqual(errors, []);
});

test("the MIG GPU's card (GPU 0, the H100) shows gold with its promise", async () => {
  const { context, page, errors } = await newPage();
  await signIn(page, p.adminToken);
  await go(page, "#/slices");
  const card = page.locator('[data-gpu="local/0"]');
  await card.waitFor();
  assert.equal((await card.locator(".tier").textContent()).trim(), "gold");
  const text = await card.textContent();
  assert.match(text, /H100/);
  assert.match(text, /enforcement: mig/);
  assert.match(text, /isolated by the hardware/);
  const p100 = await page.locator('[data-gpu="local/2"]').textContent();
  assert.match(p100, /bronze/i);
  // The A100 is an MPS GPU (silver for a slice), but the whole-GPU task of
  // the test before still holds it: what applies now is exclusive.
  const a100 = await page.locator('[data-gpu="local/1"]').textContent();
  assert.match(a100, /silver/i);
  assert.match(a100, /held by a whole-GPU task \(exclusive\)/);
  assert.match(a100, /enforcement: exclusive/);
  assert.doesNotMatch(a100, /enforcement: mps/);
  // Filters narrow the table and cards.
  await page.fill("#slice-gpu", "0");
  await page.waitForFunction(() => document.querySelectorAll(".gpu-card").length === 1);
  await page.fill("#slice-gpu", "");
  await page.waitForFunction(() => document.querySelectorAll(".gpu-card").length === 3);
  await context.close();
  assert.deepEqual(errors, []);
});

// The agent's note when a process of a task uses the GPU without the hook.
const UNHOOKED_NOTE =
  "process 4242 runs without the hook: libhfhook.so is not loaded in it (glibc too old, a static binary, or LD_PRELOAD cleared?)";

test("a slice the hook does not enforce carries a visible warning on the card, the rows and the task page", async () => {
  const t = await p.api("POST", "/api/v1/tasks", { name: "unhooked-task", command: "sleep 60", gpu_memory_mb: 1024 }, userA);
  const task = await waitFor("the unhooked task placed", async () => {
    const x = await p.api("GET", `/api/v1/tasks/${t.id}`);
    return x.slice_id ? x : null;
  });
  const { context, page, errors } = await newPage();
  // The simulated agent runs no process on a GPU, so none can honestly be
  // reported as bypassing the hook; the server's real replies are passed
  // through with this task's slice (and the task) given the agent's note.
  let marked = 0;
  let unsent = 0; // replies of the server without enforcement_note
  await context.route("**/api/v1/**", async (route) => {
    const res = await route.fetch();
    if (!(res.headers()["content-type"] ?? "").includes("json")) return route.fulfill({ response: res });
    const body = await res.json();
    const mark = (o) => {
      if (!o || typeof o !== "object") return;
      const isSlice = "enforcement" in o && o.id === task.slice_id;
      const isTask = "gpu_compute_mode" in o && o.id === task.id;
      if (isSlice || isTask) {
        if (!("enforcement_note" in o)) unsent++;
        o.enforcement_note = UNHOOKED_NOTE;
        marked++;
      }
    };
    mark(body);
    if (Array.isArray(body?.items)) body.items.forEach(mark);
    await route.fulfill({ response: res, json: body });
  });
  await signIn(page, userA);

  await go(page, "#/slices");
  const row = page.locator(`tr[data-slice-id="${task.slice_id}"]`);
  await row.locator("[data-testid=enforcement-note]").waitFor();
  assert.match(await row.textContent(), /Not enforced by the hook:.*process 4242 runs without the hook/);
  // Only that slice: the other slices' rows carry no warning.
  assert.equal(await page.locator("tbody [data-testid=enforcement-note]").count(), 1);
  const card = page.locator(`[data-gpu="${task.node_id}/${task.gpu_indices[0]}"]`);
  const cardNote = card.locator("[data-testid=enforcement-note]");
  await cardNote.first().waitFor(); // the cards come from their own poll
  assert.equal(await cardNote.count(), 1);
  assert.match(await cardNote.textContent(), new RegExp(`slice ${task.slice_id}, task ${task.id}\\):.*LD_PRELOAD cleared`));
  assert.equal(await page.locator(".gpu-card [data-testid=enforcement-note]").count(), 1, "no other card warns");
  await screenshot(page, "slices-unhooked");

  await go(page, "#/tasks");
  const taskRow = page.locator(`tr[data-task-id="${task.id}"]`);
  await taskRow.locator("[data-testid=enforcement-note]").waitFor();
  assert.equal(await page.locator("tbody [data-testid=enforcement-note]").count(), 1);

  await go(page, `#/tasks/${task.id}`);
  const note = page.locator("main [data-testid=enforcement-note]");
  await note.waitFor();
  assert.match(await note.textContent(), new RegExp(`Not enforced by the hook \\(slice ${task.slice_id}\\):.*glibc too old`));
  assert.ok(await note.isVisible());
  await screenshot(page, "task-unhooked");
  assert.ok(marked > 0);
  assert.equal(unsent, 0, "the server sends enforcement_note on every slice and task");

  // Without the note (the server's own replies), no warning anywhere. The
  // console polls, so a reply may be in the handler right now: wait for it
  // rather than let the route fall through underneath it.
  await context.unrouteAll({ behavior: "wait" });
  await page.reload();
  await page.waitForSelector("[data-testid=whoami]");
  await page.waitForFunction(() => document.querySelector(".status")?.textContent?.length > 0);
  assert.equal(await page.locator("[data-testid=enforcement-note]").count(), 0);
  await context.close();
  assert.deepEqual(errors, []);
  await p.api("POST", `/api/v1/tasks/${task.id}/cancel`, {});
});

// GET /advice as the server would answer it for a GPU where a slice runs
// 1.42x slower shared (the simulated agent times no kernels, so the real
// reply has no items): the page renders the numbers and the advice given.
const ADVICE = {
  threshold: 1.3,
  items: [
    {
      node_id: "local",
      gpu_index: 1,
      gpu_model: "NVIDIA A100-SXM4-80GB",
      interference_max: 1.42,
      slices: [
        { slice_id: 901, task_id: 902, tenant: "ta", qos: "bronze", compute_percent: 30, memory_mb: 4096,
          share_achieved_percent: 21.5, interference: 1.42, interference_samples: 310, reported_at: "2026-12-01T00:00:00.000Z" },
        { slice_id: 903, task_id: 904, tenant: "ta", qos: "bronze", compute_percent: 50, memory_mb: 8192,
          share_achieved_percent: null, interference: null, interference_samples: 0, reported_at: null },
      ],
      others: { slices: 1, compute_percent: 20 },
      advice: [
        { action: "move", slice_id: 901, task_id: 902, to: { node_id: "local", gpu_index: 2 },
          reason: "slice 901 (task 902) runs 1.42x slower when it shares GPU 1 of node local than alone (310 samples); GPU 2 of node local has room: move it there" },
        { action: "lower_share", slice_id: null, task_id: null, to: null,
          reason: "a slice of another tenant takes the most of this GPU's time: ask a platform admin to lower that slice's compute share" },
      ],
    },
  ],
};

test("the advice page lists a suffering GPU's slices, their interference and the advice", async () => {
  const { context, page, errors } = await newPage();
  let asked = 0;
  await context.route("**/api/v1/advice**", async (route) => {
    asked++;
    await route.fulfill({ status: 200, contentType: "application/json", body: JSON.stringify(ADVICE) });
  });
  await signIn(page, p.adminToken);
  await go(page, "#/advice");
  const card = page.locator('[data-advice-gpu="local/1"]');
  await card.waitFor();
  assert.match(await card.locator("[data-testid=interference-max]").textContent(), /1\.42x slower/);
  assert.match(await card.locator('tr[data-slice-id="901"]').textContent(), /1\.42x slower when shared, 310 samples/);
  assert.match(await card.locator('tr[data-slice-id="903"]').textContent(), /not measured/);
  assert.match(await card.textContent(), /1 slice\(s\) of other tenants, 20% compute in all/);
  const move = card.locator('[data-advice="move"]');
  assert.match(await move.textContent(), /Move slice 901 \(task 902\) → local · GPU 2: .*310 samples/);
  assert.match(await card.locator('[data-advice="lower_share"]').textContent(), /ask a platform admin/);
  // A threshold the API would refuse is explained, not sent.
  await page.fill("#advice-threshold", "0.5");
  await page.waitForFunction(() => document.querySelector("#advice-threshold-error")?.textContent?.includes("above 1"));
  assert.ok(asked > 0);
  await screenshot(page, "advice-items");
  await context.unrouteAll({ behavior: "wait" });
  await context.close();
  assert.deepEqual(errors, []);
});

// A slice with stored usage over time. The simulated agent's tasks run no
// hook, so a second node, "hist", is registered through the API (as an
// agent would, with the admin token) with a GPU only it has room on, and
// its heartbeats carry the hook's counters as a real agent's do: the
// server stores each report that changed materially, and the task page
// draws them from GET /slices/{id}/usage.
test("the task page charts a slice's usage over time from its stored reports", async () => {
  const GiB = 2 ** 30;
  const report = {
    containerized: false, hook_available: true, cpu_milli: 64000, host_memory_mb: 262144, agent_version: "test",
    gpus: [{ index: 0, uuid: "GPU-hist-0", vendor: "nvidia", model: "NVIDIA B200", memory_mb: 196608,
             compute_capability: "10.0", mig_capable: false, mps_capable: false, health: "ok" }],
  };
  await p.api("POST", "/api/v1/nodes/register", { ...report, node_id: "hist" });
  // 100 GiB fits no GPU of the simulated node.
  const t = await p.api("POST", "/api/v1/tasks", { name: "usage-chart-task", command: "sleep 60", gpu_memory_mb: 102400, gpu_compute_ratio: 0.3 }, userA);
  const task = await waitFor("the task placed on hist", async () => {
    const x = await p.api("GET", `/api/v1/tasks/${t.id}`);
    return x.slice_id ? x : null;
  });
  assert.equal(task.node_id, "hist");
  await p.api("POST", "/api/v1/nodes/hist/task-states", { states: [{ task_id: task.id, slice_id: task.slice_id, state: "running" }] });
  const hook = (used, share, interference) => ({
    attached: true, attaches: 1, processes: 1, used_bytes: used, peak_bytes: used, quota_bytes: 100 * GiB,
    quota_ooms: 0, physical_ooms: 0, share_achieved_percent: share, interference, interference_samples: 200,
  });
  for (const [used, share, interference] of [[10, 20, 1.1], [20, 26, 1.2], [30, 28, 1.3], [40, 29, 1.45]]) {
    await p.api("POST", "/api/v1/nodes/hist/heartbeat", {
      ...report,
      tasks: [{ task_id: task.id, state: "running", gpu_indices: [0], hook: hook(used * GiB, share, interference) }],
    });
    await new Promise((r) => setTimeout(r, 20));
  }
  const history = await p.api("GET", `/api/v1/slices/${task.slice_id}/usage`, undefined, userA);
  assert.equal(history.items.length, 4);

  const { context, page, errors } = await newPage();
  await signIn(page, userA);
  await go(page, `#/tasks/${task.id}`);
  const chart = page.locator("[data-testid=slice-usage] [data-testid=usage-chart]");
  await chart.waitFor();
  assert.equal(await chart.getAttribute("data-points"), "4");
  const summary = await chart.locator("[data-testid=usage-chart-summary]").textContent();
  assert.match(summary, /^max 40 GiB of 100 GiB over \d+ m?s \(4 reports\); GPU time share 20–29% \(set 30%\); interference up to 1\.45x/);
  // The chart's accessible name carries the same summary.
  assert.match(await chart.locator("svg title").textContent(), new RegExp(`^Slice ${task.slice_id} usage over time: max 40 GiB of 100 GiB`));
  for (const series of ["used", "share", "interference"]) {
    const d = await chart.locator(`path[data-series=${series}]`).getAttribute("d");
    assert.equal((d.match(/[ML]/g) ?? []).length, 4, `${series}: one point per report`);
  }
  await screenshot(page, "task-usage-chart");

  // The slices page: behind the slice's disclosure on its GPU's card.
  await go(page, "#/slices");
  const details = page.locator(`[data-usage-details="${task.slice_id}"]`);
  await details.locator("summary").click();
  await details.locator("[data-testid=usage-chart]").waitFor();
  assert.equal(await details.locator("[data-testid=usage-chart]").getAttribute("data-points"), "4");
  await context.close();
  assert.deepEqual(errors, []);
  // Ended: the slice is released and its history stays.
  await p.api("POST", "/api/v1/nodes/hist/task-states", { states: [{ task_id: task.id, slice_id: task.slice_id, state: "succeeded" }] });
  assert.equal((await p.api("GET", `/api/v1/slices/${task.slice_id}/usage`)).items.length, 4);
});

const PAGES = [
  ["tasks", "#/tasks"],
  ["slices", "#/slices"],
  ["nodes", "#/nodes"],
  ["stats", "#/stats"],
  ["history", "#/history"],
  ["advice", "#/advice"],
  ["admin", "#/admin"],
  ["defrag", "#/defrag"],
];

test("every page renders without console errors at 1366x768 and 390x844", async () => {
  const desk = await newPage({ width: 1366, height: 768 });
  await signIn(desk.page, p.adminToken);
  for (const [name, hash] of PAGES) {
    await go(desk.page, hash);
    await desk.page.waitForLoadState("networkidle");
    if (name === "stats") await desk.page.waitForSelector("canvas");
    if (name === "history") await desk.page.waitForSelector("tr[data-history-id]");
    if (name === "nodes") {
      await desk.page.waitForSelector("[data-node=local]");
      assert.equal(
        await desk.page.textContent("[data-node=local] [data-field=runtime]"),
        "process (runs tasks with a command)",
      );
    }
    if (name === "admin") await desk.page.waitForSelector("text=MIG commands");
    if (name === "defrag") await desk.page.waitForSelector("text=Propose a plan");
    // The real server: the simulated agent measures no interference.
    if (name === "advice") await desk.page.waitForSelector("[data-testid=advice-empty], [data-advice-gpu]");
    assert.ok((await desk.page.textContent("#page-title")).length > 0, name);
    await screenshot(desk.page, name);
  }
  // History paginates: next and back.
  await go(desk.page, "#/history");
  await desk.page.selectOption("#history-limit", "10");
  await desk.page.waitForSelector("tr[data-history-id]");
  const first = await desk.page.locator("tr[data-history-id]").first().getAttribute("data-history-id");
  if (!(await desk.page.isDisabled("text=Next →"))) {
    await desk.page.click("text=Next →");
    await desk.page.waitForFunction((f) => document.querySelector("tr[data-history-id]")?.getAttribute("data-history-id") !== f, first);
    await desk.page.click("text=← Previous");
    await desk.page.waitForFunction((f) => document.querySelector("tr[data-history-id]")?.getAttribute("data-history-id") === f, first);
  }
  await desk.context.close();
  assert.deepEqual(desk.errors, []);

  const phone = await newPage({ width: 390, height: 844 });
  await signIn(phone.page, p.adminToken);
  for (const [name, hash] of PAGES) {
    await go(phone.page, hash);
    await phone.page.waitForLoadState("networkidle");
    if (name === "slices" || name === "tasks") await screenshot(phone.page, `${name}-phone`);
  }
  // The nav collapses behind the menu button.
  assert.equal(await phone.page.isVisible("#primary-nav a[href='#/stats']"), false);
  await phone.page.click(".menu-toggle");
  assert.equal(await phone.page.isVisible("#primary-nav a[href='#/stats']"), true);
  // The page itself never scrolls sideways; wide tables scroll in their box.
  const overflow = await phone.page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
  assert.ok(overflow <= 1, `no horizontal page overflow (${overflow}px)`);
  await phone.context.close();
  assert.deepEqual(phone.errors, []);

  // A tenant user on every page it has: nothing forbidden is called.
  const user = await newPage();
  await signIn(user.page, userA);
  for (const [name, hash] of PAGES) {
    await go(user.page, hash);
    await user.page.waitForLoadState("networkidle");
    if (name === "nodes" || name === "admin" || name === "advice") {
      assert.equal(await user.page.textContent("#page-title"), "Not available");
    }
  }
  await user.context.close();
  assert.deepEqual(user.errors, []);
});

test("the stats page shows the GPUs held for tasks that waited long", async () => {
  // A platform of its own: tasks here wait 1 s before a hold, and two may
  // have one at once.
  const q = await startPlatform({ serverFlags: ["--hold-after", "1", "--max-holds", "2"] });
  const { context, page, errors } = await newPage();
  try {
    await q.tenant("th");
    const whole = { name: "whole", command: "sleep 600", gpu_required: 1, tenant: "th" };
    // The two GPUs out of MIG mode taken whole; a third whole-GPU task waits.
    const taken = [await q.api("POST", "/api/v1/tasks", whole), await q.api("POST", "/api/v1/tasks", whole)];
    for (const t of taken) {
      await waitFor(`task ${t.id} bound`, async () => (await q.api("GET", `/api/v1/tasks/${t.id}`)).status !== "pending");
    }
    const waiting = await q.api("POST", "/api/v1/tasks", { ...whole, name: "waiting" });
    // The P100 (GPU 2) has the least memory in use: it is held.
    const hold = await waitFor("the hold", async () => (await q.api("GET", "/api/v1/slices/stats")).placement.hold);
    assert.equal(hold.task_id, waiting.id);
    assert.deepEqual(hold.gpu_indices, [2]);
    const reason = await waitFor("the reason", async () => {
      const t = await q.api("GET", `/api/v1/tasks/${waiting.id}`);
      return t.pending_reason.includes("held for task") && t.pending_reason;
    });
    assert.match(reason, new RegExp(`GPU 2 of node local is held for task ${waiting.id}, waiting longest`));
    // A second task waiting for a whole GPU gets the other one held.
    const second = await q.api("POST", "/api/v1/tasks", { ...whole, name: "second" });
    const holds = await waitFor(
      "the second hold",
      async () => {
        const h = (await q.api("GET", "/api/v1/slices/stats")).placement.holds;
        return h.length === 2 && h;
      },
    );
    assert.deepEqual(
      holds.map((h) => [h.task_id, h.gpu_indices]),
      [
        [waiting.id, [2]],
        [second.id, [1]],
      ],
    );
    await page.goto(q.url + "/");
    await page.fill("#signin-token", q.adminToken);
    await page.click("button[type=submit]");
    await page.waitForSelector("[data-testid=whoami]");
    await go(page, "#/stats");
    const tile = page.locator(`[data-testid=hold][data-task-id="${waiting.id}"]`);
    await tile.waitFor();
    const text = await tile.textContent();
    assert.match(text, /GPU 2 of local/);
    assert.match(text, new RegExp(`held for task ${waiting.id} since `));
    const other = page.locator(`[data-testid=hold][data-task-id="${second.id}"]`);
    await other.waitFor();
    assert.match(await other.textContent(), new RegExp(`GPU 1 of local.*held for task ${second.id} since `));
    assert.equal(await page.locator("[data-testid=hold]").count(), 2);
    await screenshot(page, "stats-holds");
    for (const t of [...taken, waiting, second]) await q.api("POST", `/api/v1/tasks/${t.id}/cancel`, {});
    assert.deepEqual(errors, []);
  } finally {
    await context.close();
    await q.stop();
  }
});
