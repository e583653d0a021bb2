// Stats: cluster totals, free memory per GPU, the largest slice that can
// still be placed, and a fragmentation chart (Chart.js: accounted vs free
// per GPU); polls every 3 s and updates the chart in place.
import { useEffect, useRef } from "preact/hooks";
import { BarController, BarElement, CategoryScale, Chart, Legend, LinearScale, Tooltip } from "chart.js";
import { api, type Stats, type WhoAmI } from "../api";
import { ErrorNote, fmtMb, Page, Table, Tier, usePoll } from "../ui";

Chart.register(BarController, BarElement, CategoryScale, LinearScale, Tooltip, Legend);

function FragChart({ stats }: { stats: Stats }) {
  const canvas = useRef<HTMLCanvasElement>(null);
  const chart = useRef<Chart | null>(null);
  const labels = stats.gpus.map((g) => `${g.node_id}/${g.gpu_index}`);
  const acc = stats.gpus.map((g) => g.accounted_memory_mb);
  const free = stats.gpus.map((g) => g.free_memory_mb ?? 0);
  useEffect(() => {
    if (!canvas.current) return;
    if (!chart.current) {
      chart.current = new Chart(canvas.current, {
        type: "bar",
        data: {
          labels,
          datasets: [
            { label: "accounted MB", data: acc, backgroundColor: "#3b6fd8", stack: "m" },
            { label: "free MB", data: free, backgroundColor: "#9fd3a8", stack: "m" },
          ],
        },
        options: {
          animation: false,
          responsive: true,
          maintainAspectRatio: false,
          indexAxis: "y",
          scales: { x: { stacked: true, title: { display: true, text: "MB" } }, y: { stacked: true } },
          plugins: { legend: { position: "bottom" } },
        },
      });
    } else {
      chart.current.data.labels = labels;
      chart.current.data.datasets[0].data = acc;
      chart.current.data.datasets[1].data = free;
      chart.current.update("none");
    }
  });
  useEffect(() => () => chart.current?.destroy(), []);
  return (
    <div class="chart-box" style={{ height: `${Math.max(140, 48 * labels.length + 60)}px` }}>
      <canvas ref={canvas} role="img" aria-label="Accounted and free memory per GPU" />
    </div>
  );
}

export function StatsPage({ who }: { who: WhoAmI }) {
  const { data, error } = usePoll(() => api<Stats>("GET", "/slices/stats"), [], 3000);
  const f = data?.fragmentation;
  return (
    <Page title="Stats">
      <ErrorNote error={error} />
      {data && (
        <>
          <p class="muted small" aria-live="polite">
            Scope: {data.scope === "cluster" ? "whole cluster" : `tenant ${data.tenant}`} · refreshes every 3 s
            {who.role !== "admin" ? " · free memory and fragmentation are cluster-wide figures, shown to admins" : ""}
          </p>
          <div class="tiles">
            <div class="tile"><span class="tile-n">{data.totals.nodes}</span><span>nodes</span></div>
            <div class="tile"><span class="tile-n">{data.totals.gpus}</span><span>GPUs</span></div>
            <div class="tile"><span class="tile-n">{data.totals.live_slices}</span><span>live slices</span></div>
            {data.totals.pending_tasks !== undefined && (
              <div class="tile"><span class="tile-n">{data.totals.pending_tasks}</span><span>pending tasks</span></div>
            )}
            <div class="tile"><span class="tile-n">{fmtMb(data.totals.accounted_memory_mb)}</span><span>accounted</span></div>
            {data.totals.total_memory_mb !== undefined && (
              <div class="tile"><span class="tile-n">{fmtMb(data.totals.total_memory_mb)}</span><span>total memory</span></div>
            )}
            {data.totals.free_memory_mb !== undefined && (
              <div class="tile"><span class="tile-n">{fmtMb(data.totals.free_memory_mb)}</span><span>free memory</span></div>
            )}
            {f && (
              <div class="tile" data-testid="largest">
                <span class="tile-n">{fmtMb(f.largest_placeable_slice_mb)}</span>
                <span>largest placeable slice</span>
              </div>
            )}
            {f && (
              <div class="tile">
                <span class="tile-n">{(f.fragmentation_ratio * 100).toFixed(1)}%</span>
                <span>fragmentation ({fmtMb(f.stranded_memory_mb)} stranded)</span>
              </div>
            )}
            {data.placement && (
              <div class="tile" data-testid="placement">
                <span class="tile-n">{data.placement.policy}</span>
                <span>
                  placement
                  {data.placement.mode === "best-fit"
                    ? ` (Best-Fit until it has seen enough tasks: ${data.placement.tasks_learned ?? 0} so far)`
                    : data.placement.mode === "hf-frag"
                      ? ` (learned from ${data.placement.tasks_learned ?? 0} tasks)`
                      : ""}
                </span>
              </div>
            )}
            {(data.placement?.holds ?? (data.placement?.hold ? [data.placement.hold] : [])).map((hold) => (
              <div class="tile" data-testid="hold" data-task-id={hold.task_id} key={hold.task_id}>
                <span class="tile-n">
                  {hold.gpu_indices.length === 1 ? "GPU " : "GPUs "}
                  {hold.gpu_indices.join(", ")} of {hold.node_id}
                </span>
                <span>
                  held for task {hold.task_id} since {hold.since}: it takes no other task until that one fits
                </span>
              </div>
            ))}
          </div>
          <h2>Memory per GPU</h2>
          {data.gpus.length > 0 ? <FragChart stats={data} /> : <p class="muted">No GPUs in this view.</p>}
          {data.gpus.length > 0 && (
            <Table caption="Free memory per GPU">
              <thead>
                <tr>
                  <th scope="col">GPU</th>
                  <th scope="col">model</th>
                  <th scope="col">tier</th>
                  <th scope="col">accounted</th>
                  <th scope="col">free</th>
                  <th scope="col">total</th>
                  <th scope="col">compute accounted</th>
                  <th scope="col">health</th>
                </tr>
              </thead>
              <tbody>
                {data.gpus.map((g) => (
                  <tr key={`${g.node_id}/${g.gpu_index}`}>
                    <td>{g.node_id}/{g.gpu_index}</td>
                    <td>{g.model}</td>
                    <td><Tier level={g.qos_level} /></td>
                    <td>{fmtMb(g.accounted_memory_mb)}</td>
                    <td>{fmtMb(g.free_memory_mb)}</td>
                    <td>{fmtMb(g.total_memory_mb)}</td>
                    <td>{g.accounted_compute_percent}%</td>
                    <td>{g.health}</td>
                  </tr>
                ))}
              </tbody>
            </Table>
          )}
        </>
      )}
    </Page>
  );
}
