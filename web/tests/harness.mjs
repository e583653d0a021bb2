// The browser tests' platform: the REAL hf-server and hf-agent binaries on
// loopback (paths from CTest's environment, see web/CMakeLists.txt), the
// agent on the simulated inventory configs/local-node.json (an H100 in MIG
// mode = gold, an A100 with an MPS daemon = silver, a P100 = bronze), and
// Debian's Chromium driven by playwright-core.
//
//   const p = await startPlatform();   // server + agent, admin token ready
//   await p.api("POST", "/api/v1/tenants", { name: "a" });
//   const { browser, page, errors } = await openBrowser(p.url);
//   ... await screenshot(page, "slices");
//   await browser.close(); await p.stop();
//
// Environment: HF_SERVER_BIN, HF_AGENT_BIN, HF_CONSOLE_DIR, HF_CHROMIUM,
// HF_SCREENSHOTS, HF_SOURCE_DIR; HF_E2E_KEEP=1 keeps the temporary
// directory (database, logs) and prints where it is.
import { spawn } from "node:child_process";
import { mkdtempSync, mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { chromium } from "playwright-core";

function need(name) {
  const v = process.env[name];
  if (!v) throw new Error(`${name} is not set (run the test through ctest)`);
  return v;
}

export function freePort() {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once("error", reject);
    s.listen(0, "127.0.0.1", () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// Polls `fn` until it returns a truthy value; throws `what` on timeout.
export async function waitFor(what, fn, timeoutMs = 15000) {
  const deadline = Date.now() + timeoutMs;
  let last;
  while (Date.now() < deadline) {
    try {
      last = await fn();
      if (last) return last;
    } catch (e) {
      last = e;
    }
    await sleep(100);
  }
  throw new Error(`timed out waiting for ${what} (last: ${last})`);
}

function startProcess(bin, args, logPath) {
  const out = [];
  const child = spawn(bin, args, { stdio: ["ignore", "pipe", "pipe"] });
  const keep = (chunk) => {
    out.push(chunk);
  };
  child.stdout.on("data", keep);
  child.stderr.on("data", keep);
  child.on("exit", () => writeFileSync(logPath, Buffer.concat(out)));
  child.log = () => Buffer.concat(out).toString();
  return child;
}

async function stopProcess(child) {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise((r) => child.once("exit", r));
  child.kill("SIGTERM");
  const timer = setTimeout(() => child.kill("SIGKILL"), 10000);
  await exited;
  clearTimeout(timer);
}

// Starts hf-server and one simulated hf-agent ("local"). Returns
// { url, adminToken, api(method, path, body?, token?), tenant(name),
//   token(role, tenant), stop() }.
// `serverFlags` go to hf-server after the harness's own.
export async function startPlatform({ inventory = "configs/local-node.json", serverFlags = [] } = {}) {
  const dir = mkdtempSync(join(tmpdir(), "hf-console-"));
  const source = need("HF_SOURCE_DIR");
  const port = await freePort();
  const url = `http://127.0.0.1:${port}`;
  const adminToken = "hf_console_test_admin_" + process.pid;
  writeFileSync(join(dir, "admin.token"), adminToken, { mode: 0o600 });
  const server = startProcess(
    need("HF_SERVER_BIN"),
    [
      "--listen", `127.0.0.1:${port}`,
      "--db", `sqlite:${join(dir, "heteroflow.db")}`,
      "--admin-token-file", join(dir, "admin.token"),
      "--console-dir", need("HF_CONSOLE_DIR"),
      "--heartbeat-interval", "1",
      ...serverFlags,
    ],
    join(dir, "server.log"),
  );
  const children = [server];

  async function api(method, path, body, token = adminToken) {
    const res = await fetch(url + path, {
      method,
      headers: {
        Authorization: `Bearer ${token}`,
        ...(body === undefined ? {} : { "Content-Type": "application/json" }),
      },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const text = await res.text();
    let json = null;
    try {
      json = JSON.parse(text);
    } catch {
      // not JSON
    }
    if (!res.ok) {
      const err = new Error(`${method} ${path} -> ${res.status} ${text}`);
      err.status = res.status;
      err.body = json;
      throw err;
    }
    return json;
  }

  async function stop() {
    for (const c of children.reverse()) await stopProcess(c);
    if (process.env.HF_E2E_KEEP) {
      console.log(`kept ${dir}`);
    } else {
      rmSync(dir, { recursive: true, force: true });
    }
  }

  try {
    await waitFor("hf-server /healthz", async () => {
      if (server.exitCode !== null) {
        throw new Error(`hf-server exited: ${server.log()}`);
      }
      const r = await fetch(url + "/healthz");
      return r.ok;
    });
    const nodeToken = await api("POST", "/api/v1/tokens", {
      role: "node",
      node: "local",
      description: "console test agent",
    });
    writeFileSync(join(dir, "node.token"), nodeToken.token, { mode: 0o600 });
    mkdirSync(join(dir, "agent"));
    const agent = startProcess(
      need("HF_AGENT_BIN"),
      [
        "--server", url,
        "--token-file", join(dir, "node.token"),
        "--node-id", "local",
        "--gpu-backend", "sim",
        "--inventory", join(source, inventory),
        "--runtime", "process",
        "--state-dir", join(dir, "agent"),
        "--mps-dir", join(dir, "mps"),
        "--heartbeat-interval", "1",
      ],
      join(dir, "agent.log"),
    );
    children.push(agent);
    await waitFor("the agent's GPUs", async () => {
      if (agent.exitCode !== null) throw new Error(`hf-agent exited: ${agent.log()}`);
      const node = await api("GET", "/api/v1/nodes/local");
      return node && Array.isArray(node.gpus) && node.gpus.length > 0;
    });
  } catch (e) {
    await stop();
    throw e;
  }

  return {
    url,
    adminToken,
    dir,
    api,
    stop,
    // A tenant and a token of `role` in it; returns the secret.
    async tenant(name) {
      return api("POST", "/api/v1/tenants", { name });
    },
    async token(role, tenant) {
      const t = await api("POST", "/api/v1/tokens", {
        role,
        tenant,
        description: `console test ${role} of ${tenant}`,
      });
      return t.token;
    },
    serverLog: () => server.log(),
  };
}

// A fresh Chromium page. `errors` collects console errors and uncaught page
// errors: a test ends with `assert.deepEqual(errors, [])`.
export async function openBrowser({ width = 1366, height = 900 } = {}) {
  const browser = await chromium.launch({
    executablePath: need("HF_CHROMIUM"),
    // Chromium's sandbox refuses to run as root (CI runs as root).
    args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"],
  });
  const context = await browser.newContext({ viewport: { width, height } });
  const page = await context.newPage();
  const errors = [];
  page.on("console", (msg) => {
    if (msg.type() === "error") errors.push(`console: ${msg.text()}`);
  });
  page.on("pageerror", (err) => errors.push(`page: ${err.message}`));
  return { browser, context, page, errors };
}

// Saves a full-page screenshot to $HF_SCREENSHOTS/<name>.png.
export async function screenshot(page, name) {
  const dir = need("HF_SCREENSHOTS");
  mkdirSync(dir, { recursive: true });
  await page.screenshot({ path: join(dir, `${name}.png`), fullPage: true });
}

export { readFileSync };
