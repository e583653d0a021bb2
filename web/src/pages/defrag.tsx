// Defragmentation plans (admin): propose one, see its moves and the room
// per GPU before and after, apply or cancel it (docs/CONSOLE.md).
import { useState } from "preact/hooks";
import { api, ApiError, type DefragPlan, type DefragRoom, type List } from "../api";
import { ErrorNote, fmtMb, Page, Table, usePoll } from "../ui";

function errText(e: unknown): string {
  return e instanceof ApiError ? e.describe() : String(e);
}

function RoomTable({ plan }: { plan: DefragPlan }) {
  const after = new Map(plan.after.gpus.map((g) => [`${g.node_id}:${g.gpu_index}`, g]));
  const frag = (r: DefragRoom) => r.fragmentation.toFixed(2);
  return (
    <Table caption={`Room per GPU, plan ${plan.id}`}>
      <thead>
        <tr>
          <th scope="col">GPU</th>
          <th scope="col">largest slice before</th>
          <th scope="col">largest slice after</th>
          <th scope="col">free</th>
        </tr>
      </thead>
      <tbody>
        {plan.before.gpus.map((g) => {
          const a = after.get(`${g.node_id}:${g.gpu_index}`);
          return (
            <tr key={`${g.node_id}:${g.gpu_index}`}>
              <td>{`${g.node_id}:${g.gpu_index}`}</td>
              <td>{fmtMb(g.largest_slice_mb)}</td>
              <td>{a ? fmtMb(a.largest_slice_mb) : "—"}</td>
              <td>{fmtMb(g.free_memory_mb)} of {fmtMb(g.total_memory_mb)}</td>
            </tr>
          );
        })}
        <tr>
          <td>fragmentation</td>
          <td>{frag(plan.before)}</td>
          <td>{frag(plan.after)}</td>
          <td></td>
        </tr>
      </tbody>
    </Table>
  );
}

export function DefragPage() {
  const plans = usePoll(() => api<List<DefragPlan>>("GET", "/defrag/plans"), [], 2000);
  const [node, setNode] = useState("");
  const [goal, setGoal] = useState("");
  const [error, setError] = useState<string | null>(null);

  async function propose(e: Event) {
    e.preventDefault();
    setError(null);
    const body: Record<string, unknown> = {};
    if (node.trim()) body.node_id = node.trim();
    if (goal.trim()) {
      const mb = Number(goal);
      if (!Number.isInteger(mb) || mb < 1) {
        setError("goal_memory_mb: a whole number of MB, at least 1");
        return;
      }
      body.goal_memory_mb = mb;
    }
    try {
      await api("POST", "/defrag/plans", body);
      await plans.reload();
    } catch (err) {
      setError(errText(err));
    }
  }
  async function act(id: number, verb: "apply" | "cancel") {
    setError(null);
    try {
      await api("POST", `/defrag/plans/${id}/${verb}`, {});
    } catch (err) {
      setError(errText(err));
    }
    await plans.reload();
  }

  const items = plans.data ? [...plans.data.items].reverse() : [];
  return (
    <Page title="Defragmentation">
      <p class="muted">
        A plan moves slices of preemptible tasks so one GPU can take a larger slice. Proposing applies
        nothing; applying moves one task at a time, each stopped on its source GPU and started again on
        its target.
      </p>
      <form class="inline-form" onSubmit={propose} noValidate>
        <div class="field">
          <label for="defrag-node">Node (optional)</label>
          <input id="defrag-node" value={node} onInput={(e) => setNode((e.target as HTMLInputElement).value)} />
        </div>
        <div class="field">
          <label for="defrag-goal">Room for a slice of MB (optional)</label>
          <input id="defrag-goal" inputMode="numeric" value={goal} onInput={(e) => setGoal((e.target as HTMLInputElement).value)} aria-describedby="defrag-error" />
        </div>
        <button type="submit" class="primary">Propose a plan</button>
      </form>
      <div id="defrag-error" class="field-error" role="alert">{error ?? ""}</div>
      <ErrorNote error={plans.error} />
      {plans.data && items.length === 0 && <p class="muted">No plan yet.</p>}
      {items.map((p) => (
        <article class="card" key={p.id} data-plan={p.id}>
          <header class="section-head">
            <h2>Plan {p.id}</h2>
            <span class="status">{p.state}{p.cancel_requested && p.state === "applying" ? " (cancelling)" : ""}</span>
          </header>
          <p class="muted">
            {p.node_id ? `node ${p.node_id}` : "every node"}
            {p.goal_memory_mb ? ` · room for ${fmtMb(p.goal_memory_mb)}` : ""} · by {p.created_by}
            {p.message ? ` · ${p.message}` : ""}
          </p>
          <div class="actions">
            {p.state === "proposed" && (
              <button type="button" class="primary" onClick={() => void act(p.id, "apply")}>Apply plan {p.id}</button>
            )}
            {(p.state === "proposed" || (p.state === "applying" && !p.cancel_requested)) && (
              <button type="button" class="danger" onClick={() => void act(p.id, "cancel")}>Cancel plan {p.id}</button>
            )}
          </div>
          <Table caption={`Moves of plan ${p.id}`}>
            <thead>
              <tr>
                <th scope="col">task</th>
                <th scope="col">slice</th>
                <th scope="col">from</th>
                <th scope="col">to</th>
                <th scope="col">state</th>
              </tr>
            </thead>
            <tbody>
              {p.moves.map((m) => (
                <tr key={m.task_id}>
                  <td><a href={`#/tasks/${m.task_id}`}>{m.task_id}</a></td>
                  <td>{m.slice_id}</td>
                  <td>{`${m.from.node_id}:${m.from.gpu_index}`}</td>
                  <td>{`${m.to.node_id}:${m.to.gpu_index}`}</td>
                  <td>{m.state}{m.message ? ` — ${m.message}` : ""}</td>
                </tr>
              ))}
            </tbody>
          </Table>
          <RoomTable plan={p} />
        </article>
      ))}
    </Page>
  );
}
