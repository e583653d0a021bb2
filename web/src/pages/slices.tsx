// Slices: the live slices (filters by node and GPU index) and a capability
// card per GPU: model, memory bar (accounted vs total, measured use from the
// hook where reported), QoS tier, enforcement and what it promises (a GPU
// held by a whole-GPU task: exclusive), a warning per slice the hook does
// not enforce (its agent's note), tenants, lost state, and per reported
// slice its usage over time (a chart fetched while its disclosure is
// open). Users see their tenant's view: GET /slices/stats is narrowed to
// their tenant (no GPU totals) and GET /nodes is admin-only, so it is not
// called for them.
import { useState } from "preact/hooks";
import { api, type List, type NodeInfo, type Slice, type Stats, type StatsGpu, type WhoAmI } from "../api";
import { ENFORCEMENT_TEXT, EnforcementNote, enforcementText, ErrorNote, fmtBytes, fmtInterference, fmtMb, fmtTime, gpuEnforcement, Page, Table, Tier, UsageOverTime, usePoll } from "../ui";

function GpuCard({ g, slices, scope }: { g: StatsGpu; slices: Slice[]; scope: string }) {
  const mine = slices.filter((s) => s.node_id === g.node_id && s.gpu_indices.includes(g.gpu_index));
  // Held whole: by the stats (admins), or by a whole-GPU slice the caller
  // sees (tenant stats do not say).
  const held = (g.whole_gpu_task ?? false) || mine.some((s) => s.kind === "whole" && s.state !== "released");
  const enforcement = gpuEnforcement(g.qos_level, mine.map((s) => s.enforcement), held);
  const reported = mine.filter((s) => s.hook);
  const usedBytes = reported.reduce((a, s) => a + (s.hook?.used_bytes ?? 0), 0);
  const total = g.total_memory_mb;
  const pct = (mb: number) => (total ? Math.min(100, (mb / total) * 100) : 0);
  const lost = g.health !== "ok";
  return (
    <article class={`card gpu-card${lost ? " lost" : ""}`} data-gpu={`${g.node_id}/${g.gpu_index}`} aria-labelledby={`gpu-${g.node_id}-${g.gpu_index}`}>
      <header>
        <h3 id={`gpu-${g.node_id}-${g.gpu_index}`}>
          {g.node_id} · GPU {g.gpu_index}
        </h3>
        <Tier level={g.qos_level} />
      </header>
      <p class="model">{g.model}</p>
      {lost && (
        <p class="lost-flag" role="status">
          GPU {g.health.toUpperCase()}: takes no new slices; its slices stay.
        </p>
      )}
      <div class="membar" role="img" aria-label={`accounted ${fmtMb(g.accounted_memory_mb)}${total ? ` of ${fmtMb(total)}` : ""}${reported.length ? `, measured ${fmtBytes(usedBytes)}` : ""}`}>
        <div class="membar-acc" style={{ width: `${total ? pct(g.accounted_memory_mb) : 100}%` }} />
        {reported.length > 0 && total && <div class="membar-used" style={{ width: `${pct(usedBytes / 1048576)}%` }} />}
      </div>
      <p class="small">
        accounted {fmtMb(g.accounted_memory_mb)}
        {total ? ` of ${fmtMb(total)} (${fmtMb(g.free_memory_mb)} free)` : scope === "tenant" ? " by your tenant (GPU totals are for admins)" : ""}
        {reported.length > 0 ? ` · measured ${fmtBytes(usedBytes)}` : " · measured: not reported"}
      </p>
      <p class="small">
        compute accounted {g.accounted_compute_percent}%{held ? " · held by a whole-GPU task (exclusive)" : ""}
      </p>
      {reported.length > 0 && (
        <ul class="small usage-list" aria-label={`measured usage per slice on GPU ${g.gpu_index}`}>
          {reported.map((s) => (
            <li key={s.id} data-slice-usage={s.id}>
              slice {s.id}: {fmtBytes(s.hook?.used_bytes ?? 0)} used
              {s.hook?.share_achieved_percent != null ? `, ${s.hook.share_achieved_percent.toFixed(0)}% of the GPU's time (set ${s.compute_percent}%)` : ""}
              {`, interference: ${fmtInterference(s.hook?.interference, s.hook?.interference_samples)}`}
              {s.hook?.quota_ooms ? `, ${s.hook.quota_ooms} refused by the quota` : ""} · {fmtTime(s.hook?.reported_at ?? "")}
              <UsageOverTime slice={s} />
            </li>
          ))}
        </ul>
      )}
      <p class="enf">
        <span class="enf-name">enforcement: {enforcement}</span> — {ENFORCEMENT_TEXT[enforcement]}
      </p>
      {mine
        .filter((s) => s.enforcement_note)
        .map((s) => (
          <EnforcementNote key={s.id} note={s.enforcement_note} subject={s.task_id ? `slice ${s.id}, task ${s.task_id}` : `slice ${s.id}`} />
        ))}
      <p class="small">
        {g.mig_capable ? "MIG enabled" : "no MIG"} · {g.mps_capable ? "MPS daemon" : "no MPS"} · tenants:{" "}
        {g.tenants.length ? g.tenants.join(", ") : "none"}
      </p>
    </article>
  );
}

export function SlicesPage({ who }: { who: WhoAmI }) {
  const [node, setNode] = useState("");
  const [gpu, setGpu] = useState("");
  const isAdmin = who.role === "admin";
  const q = new URLSearchParams({ limit: "1000" });
  if (node) q.set("node_id", node);
  if (/^\d+$/.test(gpu)) q.set("gpu_index", gpu);
  const slices = usePoll(() => api<List<Slice>>("GET", `/slices?${q}`), [node, gpu], 3000);
  const all = usePoll(() => api<List<Slice>>("GET", `/slices?limit=1000`), [], 3000);
  const stats = usePoll(() => api<Stats>("GET", `/slices/stats`), [], 3000);
  const nodes = usePoll(async () => (isAdmin ? api<List<NodeInfo>>("GET", "/nodes") : null), [isAdmin], 5000);
  const nodeIds = [
    ...new Set([...(stats.data?.gpus.map((g) => g.node_id) ?? []), ...(nodes.data?.items.map((n) => n.node_id) ?? [])]),
  ].sort();
  const gpus = (stats.data?.gpus ?? []).filter((g) => (!node || g.node_id === node) && (!/^\d+$/.test(gpu) || g.gpu_index === Number(gpu)));
  const items = slices.data?.items ?? [];
  return (
    <Page title="Slices">
      <div class="filters">
        <label for="slice-node">Node</label>
        <select id="slice-node" value={node} onChange={(e) => setNode((e.target as HTMLSelectElement).value)}>
          <option value="">all nodes</option>
          {nodeIds.map((n) => (
            <option key={n} value={n}>
              {n}
            </option>
          ))}
        </select>
        <label for="slice-gpu">GPU index</label>
        <input
          id="slice-gpu"
          type="text"
          inputMode="numeric"
          size={4}
          value={gpu}
          placeholder="all"
          aria-describedby="slice-gpu-error"
          onInput={(e) => setGpu((e.target as HTMLInputElement).value)}
        />
        <span id="slice-gpu-error" class="field-error" aria-live="polite">
          {gpu && !/^\d+$/.test(gpu) ? "a GPU index is a whole number" : ""}
        </span>
      </div>
      <ErrorNote error={slices.error ?? all.error ?? stats.error ?? nodes.error} />
      <h2>GPUs</h2>
      {stats.data && gpus.length === 0 && (
        <p class="muted">{stats.data.scope === "tenant" ? "Your tenant holds no GPU yet." : "No GPUs match."}</p>
      )}
      <div class="cards">
        {/* A card waits for the slices too: without them a GPU a whole-GPU
            task holds would show its tier's enforcement, not exclusive. */}
        {all.data &&
          gpus.map((g) => <GpuCard key={`${g.node_id}/${g.gpu_index}`} g={g} slices={all.data?.items ?? []} scope={stats.data?.scope ?? "tenant"} />)}
      </div>
      <h2>Live slices</h2>
      {slices.data && items.length === 0 && <p class="muted">No live slices.</p>}
      {items.length > 0 && (
        <Table caption="Live slices">
          <thead>
            <tr>
              <th scope="col">id</th>
              <th scope="col">task</th>
              <th scope="col">tenant</th>
              <th scope="col">node / GPU</th>
              <th scope="col">kind</th>
              <th scope="col">memory</th>
              <th scope="col">compute</th>
              <th scope="col">tier</th>
              <th scope="col">enforcement</th>
              <th scope="col">measured</th>
              <th scope="col">state</th>
              <th scope="col">created</th>
            </tr>
          </thead>
          <tbody>
            {items.map((s) => (
              <tr key={s.id} data-slice-id={s.id} data-task-id={s.task_id ?? ""}>
                <td data-label="id">{s.id}</td>
                <td data-label="task">{s.task_id ? <a href={`#/tasks/${s.task_id}`}>{s.task_id}</a> : <span class="muted">{s.origin}</span>}</td>
                <td data-label="tenant" class="tenant-cell">{s.tenant}</td>
                <td data-label="node / GPU" class="gpu-cell">
                  {s.node_id} / {s.gpu_indices.join(",")}
                </td>
                <td data-label="kind">{s.kind}</td>
                <td data-label="memory">{fmtMb(s.memory_mb)}</td>
                <td data-label="compute">
                  {s.compute_percent}%{s.compute_defaulted ? " (default)" : ""}
                </td>
                <td data-label="tier" class="tier-cell">
                  <Tier level={s.qos_level} />
                </td>
                <td data-label="enforcement">
                  {enforcementText(s.enforcement, s.kind)}
                  <EnforcementNote note={s.enforcement_note} />
                </td>
                <td data-label="measured">
                  {s.hook
                    ? `${fmtBytes(s.hook.used_bytes)} (peak ${fmtBytes(s.hook.peak_bytes)}${s.hook.quota_ooms ? `; ${s.hook.quota_ooms} refused by the quota` : ""}${s.hook.physical_ooms ? `; ${s.hook.physical_ooms} by the GPU` : ""}); interference: ${fmtInterference(s.hook.interference, s.hook.interference_samples)}`
                    : "—"}
                </td>
                <td data-label="state">{s.state}</td>
                <td data-label="created" class="nowrap">{fmtTime(s.created_at)}</td>
              </tr>
            ))}
          </tbody>
        </Table>
      )}
    </Page>
  );
}
