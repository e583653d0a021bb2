// Shared pieces of the console: polling hook, formatting, the QoS tier
// vocabulary (one place for what each tier promises), small components.
import type { ComponentChildren } from "preact";
import { useCallback, useEffect, useRef, useState } from "preact/hooks";
import { ApiError, type Slice } from "./api";

/** Loads `fn` now and every `everyMs` (0: once); `reload` reloads now. */
export function usePoll<T>(fn: () => Promise<T>, deps: unknown[], everyMs = 0) {
  const [data, setData] = useState<T | null>(null);
  const [error, setError] = useState<string | null>(null);
  const alive = useRef(true);
  const load = useCallback(async () => {
    try {
      const d = await fn();
      if (alive.current) {
        setData(d);
        setError(null);
      }
    } catch (e) {
      if (alive.current) setError(e instanceof ApiError ? e.describe() : String(e));
    }
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, deps);
  useEffect(() => {
    alive.current = true;
    void load();
    const t = everyMs > 0 ? setInterval(() => void load(), everyMs) : undefined;
    return () => {
      alive.current = false;
      if (t) clearInterval(t);
    };
  }, [load, everyMs]);
  return { data, error, reload: load };
}

export function fmtMb(mb: number | null | undefined): string {
  if (mb === null || mb === undefined) return "—";
  if (mb >= 10240) return `${(mb / 1024).toFixed(1)} GB`;
  return `${mb} MB`;
}
export function fmtBytes(b: number | null | undefined): string {
  if (b === null || b === undefined) return "—";
  return fmtMb(Math.round(b / (1024 * 1024)));
}
/**
 * A slice's measured interference for people: "1.42x slower when shared,
 * 310 samples", or "not measured" (no report, or the agent has not yet
 * timed the task both alone and shared).
 */
export function fmtInterference(interference: number | null | undefined, samples: number | null | undefined): string {
  if (interference === null || interference === undefined) return "not measured";
  return `${interference.toFixed(2)}x slower when shared, ${samples ?? 0} samples`;
}

export function fmtTime(s: string | null | undefined): string {
  if (!s) return "—";
  return s.replace("T", " ").replace(/\.\d+Z$/, "Z");
}

/** What each tier's enforcement does and does not promise (docs/CONTRACT.md section 3). */
export const ENFORCEMENT_TEXT: Record<string, string> = {
  mig: "MIG partition: memory and compute isolated by the hardware.",
  mps: "MPS: compute share and pinned memory limited by the MPS daemon, no fault isolation.",
  hook: "Memory quota enforced by the HeteroFlow hook in the task's process; compute share is a soft limit.",
  none: "Accounted only: nothing stops a task from using more.",
  exclusive:
    "Whole GPU: the task's alone. No other slice or task is placed on it, so no MIG, MPS or hook limit applies (none is needed).",
};

/**
 * The enforcement a GPU of `tier` gives, refined by what its slices report;
 * a GPU a whole-GPU task holds is exclusive, whatever a slice there would get.
 */
export function gpuEnforcement(tier: string, sliceEnforcements: string[][], wholeOwned = false): string {
  const seen = new Set(sliceEnforcements.flat());
  if (wholeOwned || tier === "exclusive") return "exclusive";
  if (tier === "gold") return "mig";
  if (tier === "silver") return "mps";
  return seen.has("hook") ? "hook" : "none";
}

/** A slice's enforcement list for people; a whole-GPU grant needs none. */
export function enforcementText(enforcement: string[], kind?: string): string {
  if (enforcement.length > 0) return enforcement.join(", ");
  return kind === "whole" ? "none needed (exclusive)" : "none";
}

/**
 * The warning that the hook does not enforce a slice, with the agent's note
 * (which process, and the likely cause). Nothing when there is no note: an
 * enforcement is shown as claimed only while the agent proves it.
 */
export function EnforcementNote({ note, subject }: { note: string | null | undefined; subject?: string }) {
  if (!note) return null;
  return (
    <p class="enf-note" role="status" data-testid="enforcement-note">
      <strong>Not enforced by the hook{subject ? ` (${subject})` : ""}:</strong> {note}
    </p>
  );
}

export function Tier({ level }: { level: string | null | undefined }) {
  if (!level) return <span class="muted">—</span>;
  return <span class={`tier tier-${level}`}>{level}</span>;
}

export function Status({ status }: { status: string }) {
  return <span class={`status status-${status}`}>{status}</span>;
}

/** An error region screen readers announce. */
export function ErrorNote({ error }: { error: string | null | undefined }) {
  return (
    <div role="alert" aria-live="assertive" class={error ? "error-note" : "sr-only"}>
      {error ?? ""}
    </div>
  );
}

export function Page({ title, actions, children }: { title: string; actions?: ComponentChildren; children: ComponentChildren }) {
  useEffect(() => {
    document.title = `${title} · HeteroFlow`;
  }, [title]);
  return (
    <section class="page" aria-labelledby="page-title">
      <div class="page-head">
        <h1 id="page-title" tabIndex={-1}>
          {title}
        </h1>
        {actions && <div class="page-actions">{actions}</div>}
      </div>
      {children}
    </section>
  );
}

/** Horizontally scrollable table wrapper with a caption for screen readers. */
export function Table({ caption, children }: { caption: string; children: ComponentChildren }) {
  return (
    <div class="table-wrap" tabIndex={0} role="region" aria-label={caption}>
      <table>
        <caption class="sr-only">{caption}</caption>
        {children}
      </table>
    </div>
  );
}

export function KeyValues({ entries, label }: { entries: Record<string, string>; label: string }) {
  const keys = Object.keys(entries).sort();
  if (keys.length === 0) return <p class="muted">none</p>;
  return (
    <Table caption={label}>
      <thead>
        <tr>
          <th scope="col">name</th>
          <th scope="col">value</th>
        </tr>
      </thead>
      <tbody>
        {keys.map((k) => (
          <tr key={k}>
            <td class="mono">{k}</td>
            <td class="mono wrap">{entries[k]}</td>
          </tr>
        ))}
      </tbody>
    </Table>
  );
}

/** One measurement of a slice's hook report, kept by SliceUsage. */
interface UsageSample {
  at: string;
  used: number;
}

/**
 * A slice's measured usage (the hook's report the agent sends with each
 * heartbeat): memory used, peak and quota, the quota's and the driver's
 * OOMs, and a small chart of the memory used over the reports this page
 * has seen (kept while the page is open; the last 120).
 */
export function SliceUsage({ slice }: { slice: Slice }) {
  const samples = useRef<UsageSample[]>([]);
  const h = slice.hook;
  if (h) {
    const last = samples.current[samples.current.length - 1];
    if (!last || last.at !== h.reported_at) {
      samples.current = [...samples.current, { at: h.reported_at, used: h.used_bytes }].slice(-120);
    }
  }
  if (!h) return <p class="muted" data-testid="slice-usage">No usage reported yet (the hook reports once a process of the task uses the GPU).</p>;
  const points = samples.current;
  const cap = Math.max(h.quota_bytes ?? 0, h.peak_bytes, 1);
  const w = 240;
  const ht = 48;
  const path = points
    .map((p, i) => {
      const x = points.length > 1 ? (i / (points.length - 1)) * w : w;
      const y = ht - (p.used / cap) * ht;
      return `${i === 0 ? "M" : "L"}${x.toFixed(1)},${y.toFixed(1)}`;
    })
    .join(" ");
  return (
    <div data-testid="slice-usage">
      <dl class="fields">
        <dt>Memory used</dt>
        <dd data-testid="usage-used">{fmtBytes(h.used_bytes)}</dd>
        <dt>Peak</dt>
        <dd>{fmtBytes(h.peak_bytes)}</dd>
        <dt>Quota</dt>
        <dd>{h.quota_bytes === null ? "no cap" : fmtBytes(h.quota_bytes)}</dd>
        <dt>Refused by the quota</dt>
        <dd data-testid="usage-quota-ooms">{h.quota_ooms}</dd>
        <dt>Refused by the GPU</dt>
        <dd data-testid="usage-physical-ooms">{h.physical_ooms}</dd>
        <dt>GPU time share achieved</dt>
        <dd data-testid="usage-share">
          {h.share_achieved_percent == null ? "not measured" : `${h.share_achieved_percent.toFixed(1)}% (set ${slice.compute_percent}%)`}
        </dd>
        <dt>Interference</dt>
        <dd data-testid="usage-interference">{fmtInterference(h.interference, h.interference_samples)}</dd>
        <dt>Processes</dt>
        <dd>{h.processes}</dd>
        <dt>Measured</dt>
        <dd>{fmtTime(h.reported_at)}</dd>
      </dl>
      <svg width={w} height={ht} viewBox={`0 0 ${w} ${ht}`} role="img" aria-label={`Memory used over the last ${points.length} reports, up to ${fmtBytes(cap)}`}>
        <rect x="0" y="0" width={w} height={ht} fill="none" stroke="currentColor" stroke-opacity="0.2" />
        {points.length > 0 && <path d={path} fill="none" stroke="currentColor" stroke-width="1.5" />}
      </svg>
    </div>
  );
}
