// History: the operation log, paginated with limit/cursor (next/previous;
// the cursors seen are kept so "previous" goes back exactly).
import { useState } from "preact/hooks";
import { api, type HistoryEntry, type List } from "../api";
import { ErrorNote, fmtMb, fmtTime, Page, Table, usePoll } from "../ui";

export function HistoryPage() {
  const [limit, setLimit] = useState(20);
  const [cursors, setCursors] = useState<(string | null)[]>([null]);
  const cursor = cursors[cursors.length - 1];
  const { data, error } = usePoll(
    () => api<List<HistoryEntry>>("GET", `/slices/history?limit=${limit}${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ""}`),
    [limit, cursor],
  );
  const page = cursors.length;
  return (
    <Page title="History">
      <div class="filters">
        <label for="history-limit">Per page</label>
        <select
          id="history-limit"
          value={String(limit)}
          onChange={(e) => {
            setLimit(Number((e.target as HTMLSelectElement).value));
            setCursors([null]);
          }}
        >
          {[10, 20, 50, 100].map((n) => (
            <option key={n} value={String(n)}>
              {n}
            </option>
          ))}
        </select>
        <span class="muted" aria-live="polite">page {page}</span>
        <button type="button" disabled={page <= 1} onClick={() => setCursors(cursors.slice(0, -1))}>
          ← Previous
        </button>
        <button type="button" disabled={!data?.next_cursor} onClick={() => data?.next_cursor && setCursors([...cursors, data.next_cursor])}>
          Next →
        </button>
      </div>
      <ErrorNote error={error} />
      {data && data.items.length === 0 && <p class="muted">No entries.</p>}
      {data && data.items.length > 0 && (
        <Table caption="Operation log">
          <thead>
            <tr>
              <th scope="col">id</th>
              <th scope="col">at</th>
              <th scope="col">op</th>
              <th scope="col">slice</th>
              <th scope="col">task</th>
              <th scope="col">tenant</th>
              <th scope="col">node / GPU</th>
              <th scope="col">memory</th>
              <th scope="col">compute</th>
              <th scope="col">actor</th>
              <th scope="col">reason</th>
            </tr>
          </thead>
          <tbody>
            {data.items.map((h) => (
              <tr key={h.id} data-history-id={h.id}>
                <td>{h.id}</td>
                <td class="nowrap">{fmtTime(h.at)}</td>
                <td><span class="op">{h.op}</span></td>
                <td>{h.slice_id ?? "—"}</td>
                <td>{h.task_id ? <a href={`#/tasks/${h.task_id}`}>{h.task_id}</a> : "—"}</td>
                <td>{h.tenant ?? "—"}</td>
                <td>{h.node_id ? `${h.node_id} / ${h.gpu_index ?? "—"}` : "—"}</td>
                <td>{fmtMb(h.memory_mb)}</td>
                <td>{h.compute_percent !== null ? `${h.compute_percent}%` : "—"}</td>
                <td>{h.actor}</td>
                <td class="reason">{h.reason}</td>
              </tr>
            ))}
          </tbody>
        </Table>
      )}
    </Page>
  );
}
