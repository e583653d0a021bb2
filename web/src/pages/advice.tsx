// Advice (admin, tenant-admin): the GPUs where a slice runs measurably
// slower shared than alone (its agent's `interference`), worst first, with
// the slices there and what to do — move a slice, give it gold, lower a
// neighbour's compute share — each with the numbers behind it
// (GET /advice, docs/API.md "Interference advice"; docs/CONSOLE.md). A
// tenant-admin sees its own slices only; the others as a count.
import { useState } from "preact/hooks";
import { api, type Advice, type AdviceAction, type AdviceItem } from "../api";
import { ErrorNote, fmtInterference, fmtMb, fmtTime, Page, Table, Tier, usePoll } from "../ui";

const ACTION_TEXT: Record<AdviceAction["action"], string> = {
  move: "Move",
  gold: "Give it gold",
  lower_share: "Lower a neighbour's share",
};

/** The threshold field's rule, as the API checks it (number > 1, <= 100). */
function thresholdError(text: string): string | null {
  if (!text.trim()) return null;
  const n = Number(text);
  if (!Number.isFinite(n) || n <= 1 || n > 100) return "a number above 1 and at most 100 (1.3: 30% slower shared than alone)";
  return null;
}

function ActionList({ item }: { item: AdviceItem }) {
  if (item.advice.length === 0) {
    return <p class="muted small">Nothing to suggest: no GPU has room for it now and no neighbour takes a larger share.</p>;
  }
  return (
    <ul class="advice-list">
      {item.advice.map((a, i) => (
        <li key={i} data-advice={a.action} data-slice-id={a.slice_id ?? ""}>
          <strong>{ACTION_TEXT[a.action]}</strong>
          {a.slice_id !== null ? ` slice ${a.slice_id}` : ""}
          {a.task_id !== null ? (
            <>
              {" "}(task <a href={`#/tasks/${a.task_id}`}>{a.task_id}</a>)
            </>
          ) : null}
          {a.to ? ` → ${a.to.node_id} · GPU ${a.to.gpu_index}` : ""}: <span class="reason">{a.reason}</span>
        </li>
      ))}
    </ul>
  );
}

function ItemCard({ item }: { item: AdviceItem }) {
  const id = `advice-${item.node_id}-${item.gpu_index}`;
  return (
    <article class="card" data-advice-gpu={`${item.node_id}/${item.gpu_index}`} aria-labelledby={id}>
      <header class="section-head">
        <h2 id={id}>
          {item.node_id} · GPU {item.gpu_index}
        </h2>
        <span class="status status-failed" data-testid="interference-max">
          up to {item.interference_max.toFixed(2)}x slower
        </span>
      </header>
      <p class="muted small">
        {item.gpu_model ?? "model unknown"}
        {item.others.slices > 0 ? ` · ${item.others.slices} slice(s) of other tenants, ${item.others.compute_percent}% compute in all` : ""}
      </p>
      <Table caption={`Slices on ${item.node_id} GPU ${item.gpu_index}`}>
        <thead>
          <tr>
            <th scope="col">slice</th>
            <th scope="col">task</th>
            <th scope="col">tenant</th>
            <th scope="col">tier</th>
            <th scope="col">memory</th>
            <th scope="col">compute set</th>
            <th scope="col">time share used</th>
            <th scope="col">interference</th>
            <th scope="col">measured</th>
          </tr>
        </thead>
        <tbody>
          {item.slices.map((s) => (
            <tr key={s.slice_id} data-slice-id={s.slice_id}>
              <td data-label="slice">{s.slice_id}</td>
              <td data-label="task">{s.task_id ? <a href={`#/tasks/${s.task_id}`}>{s.task_id}</a> : <span class="muted">—</span>}</td>
              <td data-label="tenant">{s.tenant}</td>
              <td data-label="tier">
                <Tier level={s.qos} />
              </td>
              <td data-label="memory">{fmtMb(s.memory_mb)}</td>
              <td data-label="compute set">{s.compute_percent}%</td>
              <td data-label="time share used">{s.share_achieved_percent == null ? "not measured" : `${s.share_achieved_percent.toFixed(1)}%`}</td>
              <td data-label="interference">{fmtInterference(s.interference, s.interference_samples)}</td>
              <td data-label="measured" class="nowrap">{fmtTime(s.reported_at)}</td>
            </tr>
          ))}
        </tbody>
      </Table>
      <h3>What to do</h3>
      <ActionList item={item} />
    </article>
  );
}

export function AdvicePage() {
  const [threshold, setThreshold] = useState("");
  const bad = thresholdError(threshold);
  const q = new URLSearchParams();
  if (threshold.trim() && !bad) q.set("threshold", threshold.trim());
  const query = q.toString();
  const advice = usePoll(() => api<Advice>("GET", `/advice${query ? `?${query}` : ""}`), [query], 5000);
  const items = advice.data?.items ?? [];
  return (
    <Page title="Advice">
      <p class="muted">
        GPUs where a slice runs slower while it shares the GPU than while it has it alone (interference, as its agent
        measures it), worst first, and what would help: moving the slice to a GPU with room where nothing suffers, a MIG
        partition (gold), or a smaller compute share for the neighbour that takes the most of the GPU's time.
      </p>
      <div class="filters">
        <label for="advice-threshold">Slower than</label>
        <input
          id="advice-threshold"
          type="text"
          inputMode="decimal"
          size={6}
          value={threshold}
          placeholder="1.3"
          aria-invalid={bad ? "true" : undefined}
          aria-describedby="advice-threshold-error"
          onInput={(e) => setThreshold((e.target as HTMLInputElement).value)}
        />
        <span class="muted small">x (shared against alone)</span>
        <span id="advice-threshold-error" class="field-error" aria-live="polite">
          {bad ?? ""}
        </span>
      </div>
      <ErrorNote error={advice.error} />
      {advice.data && items.length === 0 && (
        <p class="muted" data-testid="advice-empty">
          No slice runs {advice.data.threshold}x slower or more when shared: nothing to advise.
        </p>
      )}
      {items.map((item) => (
        <ItemCard key={`${item.node_id}/${item.gpu_index}`} item={item} />
      ))}
    </Page>
  );
}
