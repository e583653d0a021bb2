// Nodes (admin): heartbeat age, capabilities, containerized flag, task
// runtime, GPUs.
import { api, type List, type NodeInfo } from "../api";
import { ErrorNote, fmtMb, fmtTime, Page, Table, usePoll } from "../ui";

// What the node's runtime starts a task from (the server offers it only the
// tasks it can start).
function runtimeText(runtime: string | null): string {
  if (runtime === "process" || runtime === "sim") return `${runtime} (runs tasks with a command)`;
  if (runtime === "docker") return "docker (runs tasks with an image)";
  return runtime ?? "not reported (takes every task)";
}

export function NodesPage() {
  const { data, error } = usePoll(() => api<List<NodeInfo>>("GET", "/nodes"), [], 3000);
  return (
    <Page title="Nodes">
      <ErrorNote error={error} />
      {data && data.items.length === 0 && <p class="muted">No node has registered.</p>}
      {data?.items.map((n) => {
        const stale = n.heartbeat_age_s !== null && n.heartbeat_age_s > 30;
        return (
          <article class="card node" key={n.node_id} data-node={n.node_id}>
            <header class="section-head">
              <h2>{n.node_id}</h2>
              <span class={stale ? "status status-failed" : "status status-running"}>
                heartbeat {n.heartbeat_age_s === null ? "never" : `${n.heartbeat_age_s.toFixed(1)} s ago`}
              </span>
            </header>
            <dl class="fields compact">
              <dt>Last heartbeat</dt>
              <dd>{fmtTime(n.last_heartbeat_at)}</dd>
              <dt>Containerized</dt>
              <dd>{n.containerized ? "yes (all its GPUs are bronze)" : "no"}</dd>
              <dt>Hook available</dt>
              <dd>{n.hook_available ? "yes" : "no"}</dd>
              <dt>Task runtime</dt>
              <dd data-field="runtime">{runtimeText(n.runtime)}</dd>
              <dt>CPU / host memory</dt>
              <dd>
                {(n.cpu_milli / 1000).toFixed(1)} cores · {fmtMb(n.host_memory_mb)}
              </dd>
              <dt>Agent</dt>
              <dd>{n.agent_version}</dd>
            </dl>
            <Table caption={`GPUs of ${n.node_id}`}>
              <thead>
                <tr>
                  <th scope="col">index</th>
                  <th scope="col">model</th>
                  <th scope="col">memory</th>
                  <th scope="col">compute capability</th>
                  <th scope="col">MIG</th>
                  <th scope="col">MPS</th>
                  <th scope="col">health</th>
                  <th scope="col">uuid</th>
                </tr>
              </thead>
              <tbody>
                {n.gpus.map((g) => (
                  <tr key={g.index}>
                    <td>{g.index}</td>
                    <td>{g.model}</td>
                    <td>{fmtMb(g.memory_mb)}</td>
                    <td>{g.compute_capability}</td>
                    <td>{g.mig_capable ? "enabled" : "—"}</td>
                    <td>{g.mps_capable ? "daemon alive" : "—"}</td>
                    <td class={g.health === "ok" ? "" : "lost-flag"}>{g.health}</td>
                    <td class="mono">{g.uuid}</td>
                  </tr>
                ))}
              </tbody>
            </Table>
          </article>
        );
      })}
    </Page>
  );
}
