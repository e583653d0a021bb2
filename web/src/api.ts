// The console's only way to the platform: the public REST API under
// /api/v1 (same origin), with the user's Bearer token kept in
// sessionStorage (gone when the tab closes; never in localStorage or a
// cookie). Errors come back as ApiError carrying the API's error JSON
// ({"error", "message", "field"}, docs/API.md) so forms can put a server
// 400 next to the field it names.

const TOKEN_KEY = "heteroflow.token";

export function getToken(): string | null {
  return sessionStorage.getItem(TOKEN_KEY);
}
export function setToken(token: string | null): void {
  if (token) sessionStorage.setItem(TOKEN_KEY, token);
  else sessionStorage.removeItem(TOKEN_KEY);
}

export class ApiError extends Error {
  constructor(
    public status: number,
    public code: string,
    message: string,
    public field: string | null,
  ) {
    super(message);
  }
  /** A sentence for people: the HTTP meaning first, then the server's words. */
  describe(): string {
    if (this.status === 401) return "token not accepted";
    if (this.status === 403) return `not allowed for this token: ${this.message}`;
    if (this.status === 0) return `cannot reach the server: ${this.message}`;
    return this.field ? `${this.field}: ${this.message}` : this.message;
  }
}

/** Called on any 401 after sign-in (token revoked): the app signs out. */
let onUnauthorized: (() => void) | null = null;
export function setUnauthorizedHandler(fn: (() => void) | null): void {
  onUnauthorized = fn;
}

export async function api<T>(
  method: string,
  path: string,
  body?: unknown,
  token: string | null = getToken(),
): Promise<T> {
  let res: Response;
  try {
    res = await fetch(`api/v1${path}`, {
      method,
      headers: {
        ...(token ? { Authorization: `Bearer ${token}` } : {}),
        ...(body === undefined ? {} : { "Content-Type": "application/json" }),
      },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
  } catch (e) {
    throw new ApiError(0, "unavailable", String(e), null);
  }
  const text = await res.text();
  let json: unknown = null;
  try {
    json = text ? JSON.parse(text) : null;
  } catch {
    json = null;
  }
  if (!res.ok) {
    const j = (json ?? {}) as { error?: string; message?: string; field?: string };
    if (res.status === 401 && onUnauthorized) onUnauthorized();
    throw new ApiError(res.status, j.error ?? "error", j.message ?? (text || res.statusText), j.field ?? null);
  }
  return json as T;
}

export interface List<T> {
  items: T[];
  next_cursor: string | null;
}

export interface WhoAmI {
  role: "admin" | "tenant-admin" | "user" | "node";
  tenant: string | null;
  token_id: number;
}

/** How the hook shares a GPU's time between slices (docs/API.md). */
export type GpuComputeMode = "strict" | "work-conserving";

export interface Task {
  id: number;
  name: string;
  tenant: string;
  image: string;
  command: string | string[];
  gpu_type: string;
  gpu_required: number;
  gpu_memory_mb: number | null;
  gpu_compute_ratio: number | null;
  gpu_compute_percent: number | null;
  gpu_compute_mode: GpuComputeMode;
  preemptible: boolean;
  env: Record<string, string>;
  labels: Record<string, string>;
  status: string;
  pending_reason: string | null;
  slice_id: number | null;
  node_id: string | null;
  gpu_indices: number[];
  qos_level: string | null;
  exit_code: number | null;
  message: string;
  /** Why the hook does not enforce the task's slice (a process of the task
   *  uses the GPU without it), as its agent last reported; null otherwise. */
  enforcement_note: string | null;
  cancel_requested: boolean;
  created_at: string;
  updated_at: string;
}

export interface HookReport {
  attached: boolean;
  processes: number;
  used_bytes: number;
  peak_bytes: number;
  quota_bytes: number | null;
  quota_ooms: number;
  physical_ooms: number;
  // The GPU time share achieved in the agent's last window (0..100).
  share_achieved_percent?: number | null;
  /** The task's sampled kernels' time while other slices used its GPU
   *  divided by their time while it had the GPU alone (1.0: no slowdown;
   *  1.5: 50% slower); null until the agent has seen both. */
  interference?: number | null;
  /** The timed launches behind `interference`. */
  interference_samples?: number;
  reported_at: string;
}

/** One stored report of a slice's usage (GET /slices/{id}/usage). */
export interface UsagePoint {
  reported_at: string;
  used_bytes: number;
  peak_bytes: number;
  quota_bytes: number | null;
  quota_ooms: number;
  physical_ooms: number;
  share_achieved_percent: number | null;
  interference: number | null;
}

/** A slice's stored usage over time, oldest first (the newest 240 reports). */
export interface UsageHistory {
  slice_id: number;
  items: UsagePoint[];
}

export interface Slice {
  id: number;
  task_id: number | null;
  tenant: string;
  node_id: string;
  gpu_index: number;
  gpu_indices: number[];
  gpu_uuid: string;
  memory_mb: number;
  compute_percent: number;
  compute_defaulted: boolean;
  kind: "slice" | "whole";
  qos_level: string;
  enforcement: string[];
  state: string;
  origin: string;
  mig_device_id: string | null;
  created_at: string;
  released_at: string | null;
  hook: HookReport | null;
  /** Why the hook does not enforce this slice (its agent saw a process of
   *  the task use the GPU without the hook); null otherwise. */
  enforcement_note: string | null;
}

export interface Gpu {
  index: number;
  uuid: string;
  vendor: string;
  model: string;
  memory_mb: number;
  compute_capability: string;
  mig_capable: boolean;
  mps_capable: boolean;
  health: string;
}

export interface NodeInfo {
  node_id: string;
  containerized: boolean;
  hook_available: boolean;
  runtime: string | null;
  cpu_milli: number;
  host_memory_mb: number;
  agent_version: string;
  last_heartbeat_at: string | null;
  heartbeat_age_s: number | null;
  registered_at: string;
  gpus: Gpu[];
}

export interface StatsGpu {
  node_id: string;
  gpu_index: number;
  gpu_uuid: string;
  model: string;
  vendor: string;
  health: string;
  mig_capable: boolean;
  mps_capable: boolean;
  qos_level: string;
  tenants: string[];
  accounted_memory_mb: number;
  accounted_compute_percent: number;
  total_memory_mb?: number;
  free_memory_mb?: number;
  free_compute_percent?: number;
  slices?: number;
  whole_gpu_task?: boolean;
}

// GPUs held for a task that waited long for room (GET /slices/stats).
export interface Hold {
  task_id: number;
  node_id: string;
  gpu_indices: number[];
  since: string;
}

export interface Stats {
  scope: "cluster" | "tenant";
  tenant: string | null;
  totals: {
    nodes: number;
    gpus: number;
    live_slices: number;
    accounted_memory_mb: number;
    total_memory_mb?: number;
    free_memory_mb?: number;
    pending_tasks?: number;
  };
  nodes: { node_id: string; gpus: number; accounted_memory_mb: number; total_memory_mb?: number; free_memory_mb?: number }[];
  gpus: StatsGpu[];
  fragmentation: {
    fragmentation_ratio: number;
    free_memory_mb: number;
    largest_placeable_slice_mb: number;
    stranded_memory_mb: number;
  } | null;
  // Cluster scope only: the placement policy and what hf-frag has learned.
  // `holds`: the GPUs held for tasks that waited long, in the order the
  // holds began; `hold`: the first of them, or null.
  placement?: {
    policy: string;
    mode?: "best-fit" | "hf-frag";
    tasks_learned?: number;
    hold?: Hold | null;
    holds?: Hold[];
  } | null;
}

export interface HistoryEntry {
  id: number;
  at: string;
  op: string;
  slice_id: number | null;
  task_id: number | null;
  tenant: string | null;
  node_id: string | null;
  gpu_index: number | null;
  memory_mb: number | null;
  compute_percent: number | null;
  actor: string;
  reason: string;
}

export interface Tenant {
  name: string;
  shared_group: string | null;
  created_at: string;
}
export interface Group {
  name: string;
  tenants: string[];
}
export interface TokenInfo {
  id: number;
  role: string;
  tenant: string | null;
  node: string | null;
  description: string;
  created_at: string;
  revoked_at: string | null;
  token?: string;
}
export interface SliceRequest {
  id: number;
  node_id: string;
  slice_id: number | null;
  task_id: number | null;
  action: string;
  gpu_index: number;
  gpu_uuid: string;
  profile: string;
  state: string;
  device_id: string | null;
  error: string | null;
  created_at: string;
  claimed_at: string | null;
  finished_at: string | null;
}

export interface DefragPlace {
  node_id: string;
  gpu_index: number;
}

export interface DefragMove {
  slice_id: number;
  task_id: number;
  from: DefragPlace;
  to: DefragPlace;
  state: string;
  target_slice_id: number | null;
  message: string;
}

export interface DefragGpuRoom extends DefragPlace {
  total_memory_mb: number;
  free_memory_mb: number;
  largest_slice_mb: number;
}

export interface DefragRoom {
  fragmentation: number;
  free_memory_mb: number;
  largest_slice_mb: number;
  gpus: DefragGpuRoom[];
}

export interface DefragPlan {
  id: number;
  state: "proposed" | "applying" | "applied" | "cancelled" | "failed" | "expired";
  node_id: string | null;
  goal_memory_mb: number | null;
  max_moves: number;
  moves: DefragMove[];
  before: DefragRoom;
  after: DefragRoom;
  cancel_requested: boolean;
  message: string;
  created_by: string;
}

/** A GPU place, as advice names a target (GET /advice). */
export interface AdvicePlace {
  node_id: string;
  gpu_index: number;
}

/** A live slice on an advised GPU and its agent's last report. */
export interface AdviceSlice {
  slice_id: number;
  task_id: number | null;
  tenant: string;
  qos: string;
  compute_percent: number;
  memory_mb: number;
  share_achieved_percent: number | null;
  interference: number | null;
  interference_samples: number;
  reported_at: string | null;
}

export interface AdviceAction {
  action: "move" | "gold" | "lower_share";
  /** The slice to act on; null for another tenant's neighbour (tenant-admins). */
  slice_id: number | null;
  task_id: number | null;
  to: AdvicePlace | null;
  reason: string;
}

export interface AdviceItem {
  node_id: string;
  gpu_index: number;
  gpu_model: string | null;
  interference_max: number;
  slices: AdviceSlice[];
  /** The slices not listed (other tenants', for a tenant-admin). */
  others: { slices: number; compute_percent: number };
  advice: AdviceAction[];
}

/** GET /advice (admin, tenant-admin): GPUs where a slice suffers from sharing. */
export interface Advice {
  threshold: number;
  items: AdviceItem[];
}
