// Tasks: the list (state and pending_reason), the create form (whole GPU or
// GPU slice, validated on input, blur and submit; server 400s shown next to
// the field they name) and a task's detail with env, labels, logs, cancel.
import { useState } from "preact/hooks";
import { api, ApiError, type GpuComputeMode, type List, type Slice, type Task, type WhoAmI } from "../api";
import { computeError, gpuCountError, memoryError, nameError, parseEnv } from "../validate";
import { EnforcementNote, enforcementText, ErrorNote, fmtMb, fmtTime, KeyValues, Page, SliceUsage, Status, Table, Tier, usePoll } from "../ui";

const TERMINAL = new Set(["succeeded", "failed", "cancelled"]);

/** The choices of gpu_compute_mode, the default first. */
const COMPUTE_MODES: { value: GpuComputeMode; label: string }[] = [
  { value: "work-conserving", label: "work-conserving (default): may use GPU time other slices leave idle" },
  { value: "strict", label: "strict: never more than its share" },
];

function allocation(t: Task): string {
  if (t.gpu_required > 0) return `whole GPU × ${t.gpu_required}`;
  const mem = t.gpu_memory_mb !== null ? fmtMb(t.gpu_memory_mb) : "any memory";
  const cpu = t.gpu_compute_percent !== null ? `${t.gpu_compute_percent}%` : "unlimited compute";
  return `slice ${mem}, ${cpu}`;
}

function placement(t: Task): string {
  if (!t.node_id) return "—";
  return `${t.node_id} / GPU ${t.gpu_indices.join(",")}`;
}

export function TaskList({ who }: { who: WhoAmI }) {
  const [status, setStatus] = useState("");
  const { data, error } = usePoll(
    () => api<List<Task>>("GET", `/tasks?limit=1000${status ? `&status=${status}` : ""}`),
    [status],
    3000,
  );
  const tasks = data ? [...data.items].reverse() : [];
  return (
    <Page
      title="Tasks"
      actions={
        who.role !== "node" && (
          <a class="button primary" href="#/tasks/new">
            New task
          </a>
        )
      }
    >
      <div class="filters">
        <label for="task-status-filter">State</label>
        <select id="task-status-filter" value={status} onChange={(e) => setStatus((e.target as HTMLSelectElement).value)}>
          <option value="">all</option>
          {["pending", "scheduled", "running", "succeeded", "failed", "cancelled"].map((s) => (
            <option key={s} value={s}>
              {s}
            </option>
          ))}
        </select>
      </div>
      <ErrorNote error={error} />
      {data && tasks.length === 0 && <p class="muted">No tasks yet.</p>}
      {tasks.length > 0 && (
        <Table caption="Tasks">
          <thead>
            <tr>
              <th scope="col">id</th>
              <th scope="col">name</th>
              <th scope="col">tenant</th>
              <th scope="col">state</th>
              <th scope="col">allocation</th>
              <th scope="col">placed on</th>
              <th scope="col">tier</th>
              <th scope="col">pending reason / message</th>
              <th scope="col">created</th>
            </tr>
          </thead>
          <tbody>
            {tasks.map((t) => (
              <tr key={t.id} data-task-id={t.id}>
                <td data-label="id">{t.id}</td>
                <td data-label="name">
                  <a href={`#/tasks/${t.id}`}>{t.name}</a>
                </td>
                <td data-label="tenant">{t.tenant}</td>
                <td data-label="state">
                  <Status status={t.status} />
                </td>
                <td data-label="allocation">{allocation(t)}</td>
                <td data-label="placed on">{placement(t)}</td>
                <td data-label="tier">
                  <Tier level={t.qos_level} />
                </td>
                <td data-label="reason" class="reason">
                  {t.pending_reason ?? t.message ?? ""}
                  <EnforcementNote note={t.enforcement_note} />
                </td>
                <td data-label="created" class="nowrap">{fmtTime(t.created_at)}</td>
              </tr>
            ))}
          </tbody>
        </Table>
      )}
    </Page>
  );
}

type FieldName = "name" | "command" | "image" | "env" | "memory" | "compute" | "computeMode" | "gpus" | "tenant";

/** The form field a server 400's `field` names. */
function formField(serverField: string | null): FieldName | null {
  if (!serverField) return null;
  const top = serverField.split(/[.[]/)[0];
  const map: Record<string, FieldName> = {
    name: "name",
    command: "command",
    image: "image",
    env: "env",
    gpu_memory_mb: "memory",
    gpu_compute_ratio: "compute",
    gpu_compute_mode: "computeMode",
    gpu_required: "gpus",
    tenant: "tenant",
  };
  return map[top] ?? null;
}

function Field(props: {
  id: string;
  label: string;
  hint?: string;
  error: string | null;
  children: preact.ComponentChildren;
}) {
  const { id, label, hint, error, children } = props;
  return (
    <div class={`field${error ? " has-error" : ""}`}>
      <label for={id}>{label}</label>
      {children}
      {hint && (
        <div id={`${id}-hint`} class="hint">
          {hint}
        </div>
      )}
      <div id={`${id}-error`} class="field-error" aria-live="polite">
        {error ?? ""}
      </div>
    </div>
  );
}

export function TaskCreate({ who }: { who: WhoAmI }) {
  const [mode, setMode] = useState<"slice" | "whole">("slice");
  const [v, setV] = useState<Record<FieldName, string>>({
    name: "",
    command: "",
    image: "",
    env: "",
    memory: "",
    compute: "",
    computeMode: "work-conserving",
    gpus: "1",
    tenant: "",
  });
  const [touched, setTouched] = useState<Partial<Record<FieldName, boolean>>>({});
  const [serverErr, setServerErr] = useState<Partial<Record<FieldName, string>>>({});
  const [formError, setFormError] = useState<string | null>(null);
  const [busy, setBusy] = useState(false);

  function clientErrors(): Partial<Record<FieldName, string>> {
    const e: Partial<Record<FieldName, string>> = {};
    const n = nameError(v.name);
    if (n) e.name = n;
    if (mode === "slice") {
      const m = memoryError(v.memory, v.compute.trim() !== "");
      if (m) e.memory = m;
      const c = computeError(v.compute);
      if (c) e.compute = c;
    } else {
      const g = gpuCountError(v.gpus);
      if (g) e.gpus = g;
    }
    const env = parseEnv(v.env);
    if ("error" in env) e.env = env.error;
    return e;
  }
  const errs = clientErrors();
  const shown = (f: FieldName): string | null => serverErr[f] ?? (touched[f] ? errs[f] ?? null : null);

  function set(f: FieldName) {
    return (e: Event) => {
      const value = (e.target as HTMLInputElement).value;
      setV((old) => ({ ...old, [f]: value }));
      setTouched((t) => ({ ...t, [f]: true }));
      setServerErr((s) => ({ ...s, [f]: undefined }));
      setFormError(null);
    };
  }
  const blur = (f: FieldName) => () => setTouched((t) => ({ ...t, [f]: true }));

  async function submit(e: Event) {
    e.preventDefault();
    setTouched({ name: true, command: true, image: true, env: true, memory: true, compute: true, computeMode: true, gpus: true, tenant: true });
    const bad = Object.keys(errs) as FieldName[];
    if (bad.length > 0) {
      setFormError(`Not submitted: fix ${bad.length === 1 ? "the field" : `${bad.length} fields`} marked below.`);
      document.getElementById(`task-${bad[0]}`)?.focus();
      return;
    }
    const body: Record<string, unknown> = { name: v.name.trim() };
    if (v.command.trim()) body.command = v.command;
    if (v.image.trim()) body.image = v.image.trim();
    const env = parseEnv(v.env);
    if ("env" in env && Object.keys(env.env).length > 0) body.env = env.env;
    if (who.role === "admin" && v.tenant.trim()) body.tenant = v.tenant.trim();
    if (mode === "whole") {
      body.gpu_required = Number(v.gpus);
    } else {
      if (v.memory.trim()) body.gpu_memory_mb = Number(v.memory);
      if (v.compute.trim()) body.gpu_compute_ratio = Number(v.compute) / 100;
      body.gpu_compute_mode = v.computeMode;
    }
    setBusy(true);
    try {
      const t = await api<Task>("POST", "/tasks", body);
      location.hash = `#/tasks/${t.id}`;
    } catch (err) {
      if (err instanceof ApiError && err.status === 400) {
        const f = formField(err.field);
        if (f) {
          setServerErr({ [f]: `Server: ${err.field}: ${err.message}` });
          setFormError(`The server refused the task: ${err.field} ${err.message}`);
          document.getElementById(`task-${f}`)?.focus();
          return;
        }
      }
      setFormError(err instanceof ApiError ? err.describe() : String(err));
    } finally {
      setBusy(false);
    }
  }

  const attrs = (f: FieldName, hint = false) => ({
    id: `task-${f}`,
    name: f,
    value: v[f],
    onInput: set(f),
    onBlur: blur(f),
    "aria-invalid": shown(f) ? ("true" as const) : undefined,
    "aria-describedby": `${hint ? `task-${f}-hint ` : ""}task-${f}-error`,
  });

  return (
    <Page title="New task">
      <form class="card form" onSubmit={submit} noValidate>
        <div role="alert" aria-live="assertive" class={formError ? "error-note" : "sr-only"} id="task-form-error">
          {formError ?? ""}
        </div>
        <Field id="task-name" label="Name" error={shown("name")}>
          <input type="text" autoComplete="off" {...attrs("name")} />
        </Field>
        <Field id="task-command" label="Command" hint="Run by the shell, e.g. python serve.py" error={shown("command")}>
          <input type="text" class="mono" autoComplete="off" {...attrs("command", true)} />
        </Field>
        <Field id="task-image" label="Image (optional)" hint="Container image; the process runtime ignores it" error={shown("image")}>
          <input type="text" autoComplete="off" {...attrs("image", true)} />
        </Field>
        {who.role === "admin" && (
          <Field id="task-tenant" label="Tenant (optional)" hint="Admins act for a tenant; default: default" error={shown("tenant")}>
            <input type="text" autoComplete="off" {...attrs("tenant", true)} />
          </Field>
        )}
        <fieldset class="mode">
          <legend>Allocation mode</legend>
          <label class="radio">
            <input type="radio" name="mode" id="mode-slice" value="slice" checked={mode === "slice"} onChange={() => { setMode("slice"); setServerErr({}); }} />
            GPU slice (memory and compute share of one GPU)
          </label>
          <label class="radio">
            <input type="radio" name="mode" id="mode-whole" value="whole" checked={mode === "whole"} onChange={() => { setMode("whole"); setServerErr({}); }} />
            Whole GPU (no slicing)
          </label>
        </fieldset>
        {mode === "slice" ? (
          <div class="row">
            <Field id="task-memory" label="GPU memory (MB)" hint="At least 32, a multiple of 32" error={shown("memory")}>
              <input type="text" inputMode="numeric" autoComplete="off" {...attrs("memory", true)} />
            </Field>
            <Field id="task-compute" label="Compute (%)" hint="Whole percent 1–100; blank = unlimited" error={shown("compute")}>
              <input type="text" inputMode="numeric" autoComplete="off" {...attrs("compute", true)} />
            </Field>
          </div>
        ) : (
          <Field id="task-gpus" label="Number of GPUs" hint="Whole GPUs on one node" error={shown("gpus")}>
            <input type="text" inputMode="numeric" autoComplete="off" {...attrs("gpus", true)} />
          </Field>
        )}
        {mode === "slice" && (
          <Field
            id="task-computeMode"
            label="Compute mode"
            hint="How the hook shares the GPU's time with the other slices on it (a bronze or silver share below 100%; MIG slices ignore it)"
            error={shown("computeMode")}
          >
            <select {...attrs("computeMode", true)}>
              {COMPUTE_MODES.map((m) => (
                <option key={m.value} value={m.value}>
                  {m.label}
                </option>
              ))}
            </select>
          </Field>
        )}
        <Field id="task-env" label="Environment (optional)" hint="One NAME=value per line" error={shown("env")}>
          <textarea rows={3} class="mono" {...attrs("env", true)} />
        </Field>
        <p class="muted small">The QoS tier is not chosen here: the platform derives it from the GPU the task lands on.</p>
        <div class="actions">
          <button type="submit" class="primary" disabled={busy}>
            {busy ? "Creating…" : "Create task"}
          </button>
          <a href="#/tasks" class="button">
            Cancel
          </a>
        </div>
      </form>
    </Page>
  );
}

interface Logs {
  data: string;
  size: number;
  truncated: boolean;
}

export function TaskDetail({ id }: { id: number }) {
  const task = usePoll(() => api<Task>("GET", `/tasks/${id}`), [id], 3000);
  const logs = usePoll(() => api<Logs>("GET", `/tasks/${id}/logs?limit=1048576`), [id]);
  const slice = usePoll(
    async () => (task.data?.slice_id ? api<Slice>("GET", `/slices/${task.data.slice_id}`).catch(() => null) : null),
    [task.data?.slice_id],
    3000,
  );
  const [actionError, setActionError] = useState<string | null>(null);
  const t = task.data;
  async function cancel() {
    setActionError(null);
    try {
      await api<Task>("POST", `/tasks/${id}/cancel`);
      await task.reload();
    } catch (e) {
      setActionError(e instanceof ApiError ? e.describe() : String(e));
    }
  }
  const mig = t?.labels["heteroflow.mig_device_id"];
  return (
    <Page
      title={t ? `Task ${t.id}: ${t.name}` : `Task ${id}`}
      actions={
        t && (
          <button type="button" class="danger" onClick={cancel} disabled={TERMINAL.has(t.status) || t.cancel_requested}>
            {t.cancel_requested && !TERMINAL.has(t.status) ? "Cancelling…" : "Cancel task"}
          </button>
        )
      }
    >
      <p>
        <a href="#/tasks">← All tasks</a>
      </p>
      <ErrorNote error={task.error ?? actionError} />
      {t && (
        <>
          <EnforcementNote note={t.enforcement_note ?? slice.data?.enforcement_note} subject={t.slice_id ? `slice ${t.slice_id}` : undefined} />
          <div class="card">
            <dl class="fields">
              <dt>State</dt>
              <dd>
                <Status status={t.status} />
                {t.cancel_requested && <span class="muted"> (cancel requested)</span>}
              </dd>
              <dt>Pending reason</dt>
              <dd>{t.pending_reason ?? "—"}</dd>
              <dt>Message</dt>
              <dd>{t.message || "—"}</dd>
              <dt>Exit code</dt>
              <dd>{t.exit_code ?? "—"}</dd>
              <dt>Tenant</dt>
              <dd>{t.tenant}</dd>
              <dt>Command</dt>
              <dd class="mono wrap">{Array.isArray(t.command) ? JSON.stringify(t.command) : t.command || "—"}</dd>
              <dt>Image</dt>
              <dd class="mono">{t.image || "—"}</dd>
              <dt>Allocation</dt>
              <dd>{allocation(t)}</dd>
              <dt>Compute mode</dt>
              <dd data-testid="compute-mode">{t.gpu_compute_mode}</dd>
              <dt>GPU type</dt>
              <dd>{t.gpu_type}</dd>
              <dt>Preemptible</dt>
              <dd>{t.preemptible ? "yes" : "no"}</dd>
              <dt>Placed on</dt>
              <dd>{placement(t)}</dd>
              <dt>QoS tier</dt>
              <dd>
                <Tier level={t.qos_level} />
              </dd>
              <dt>Slice</dt>
              <dd>
                {t.slice_id ? (
                  <a href={`#/slices`}>slice {t.slice_id}</a>
                ) : (
                  "—"
                )}
                {slice.data && (
                  <span class="muted">
                    {" "}
                    ({slice.data.state}; enforcement {enforcementText(slice.data.enforcement, slice.data.kind)})
                  </span>
                )}
              </dd>
              <dt>MIG device</dt>
              <dd class="mono">{mig ?? "—"}</dd>
              <dt>Created</dt>
              <dd>{fmtTime(t.created_at)}</dd>
              <dt>Updated</dt>
              <dd>{fmtTime(t.updated_at)}</dd>
            </dl>
          </div>
          {slice.data && (
            <>
              <h2>Usage</h2>
              <div class="card">
                <SliceUsage slice={slice.data} />
              </div>
            </>
          )}
          <h2>Environment</h2>
          <KeyValues entries={t.env} label="Environment" />
          <h2>Labels</h2>
          <KeyValues entries={t.labels} label="Labels" />
          <div class="section-head">
            <h2>Logs</h2>
            <button type="button" onClick={() => void logs.reload()}>
              Refresh logs
            </button>
          </div>
          <ErrorNote error={logs.error} />
          <pre class="logs" tabIndex={0} aria-label="Task logs" data-testid="logs">
            {logs.data ? logs.data.data || "(no output yet)" : "Loading…"}
          </pre>
          {logs.data?.truncated && <p class="muted">The server keeps the first 8 MiB of a task's log.</p>}
        </>
      )}
    </Page>
  );
}
