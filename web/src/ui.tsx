// Shared pieces of the console: polling hook, formatting, the QoS tier
// vocabulary (one place for what each tier promises), small components.
import type { ComponentChildren } from "preact";
import { useCallback, useEffect, useRef, useState } from "preact/hooks";
import { api, ApiError, type Slice, type UsageHistory, type UsagePoint } from "./api";

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

/** Bytes for a chart's summary: "3.1 GiB", "4 GiB", "512 MiB". */
export function fmtGiB(b: number): string {
  const gib = b / 2 ** 30;
  if (gib >= 1) return `${Number(gib.toFixed(1))} GiB`;
  return `${Math.round(b / 2 ** 20)} MiB`;
}

/** A span of time for people: "250 ms", "42 s", "17 min", "1.5 h". */
export function fmtSpan(ms: number): string {
  if (ms < 1000) return `${Math.round(ms)} ms`;
  if (ms < 60_000) return `${Math.round(ms / 1000)} s`;
  if (ms < 120 * 60_000) return `${Math.round(ms / 60_000)} min`;
  return `${Number((ms / 3_600_000).toFixed(1))} h`;
}

/**
 * The one-line summary of a slice's stored usage that the chart shows and
 * screen readers hear: "max 3.1 GiB of 4 GiB over 42 min; GPU time share
 * 20–26% (set 50%); interference up to 1.43x; 2 refused by the quota".
 */
export function usageSummary(items: UsagePoint[], computePercent?: number): string {
  if (items.length === 0) return "no usage stored yet";
  const maxUsed = Math.max(...items.map((p) => p.used_bytes));
  const quotas = items.map((p) => p.quota_bytes).filter((q): q is number => q !== null);
  const first = Date.parse(items[0].reported_at);
  const last = Date.parse(items[items.length - 1].reported_at);
  const parts = [
    `max ${fmtGiB(maxUsed)}${quotas.length ? ` of ${fmtGiB(quotas[quotas.length - 1])}` : " (no cap)"} over ${fmtSpan(last - first)}` +
      ` (${items.length} report${items.length === 1 ? "" : "s"})`,
  ];
  const shares = items.map((p) => p.share_achieved_percent).filter((v): v is number => v !== null);
  if (shares.length) {
    const lo = Math.min(...shares).toFixed(0);
    const hi = Math.max(...shares).toFixed(0);
    parts.push(`GPU time share ${lo === hi ? lo : `${lo}–${hi}`}%${computePercent ? ` (set ${computePercent}%)` : ""}`);
  }
  const interference = items.map((p) => p.interference).filter((v): v is number => v !== null);
  if (interference.length) parts.push(`interference up to ${Math.max(...interference).toFixed(2)}x`);
  const lastPoint = items[items.length - 1];
  if (lastPoint.quota_ooms) parts.push(`${lastPoint.quota_ooms} refused by the quota`);
  if (lastPoint.physical_ooms) parts.push(`${lastPoint.physical_ooms} refused by the GPU`);
  return parts.join("; ");
}

/** An SVG path through (x, y) pairs; null values break the line. */
function linePath(points: Array<[number, number | null]>): string {
  let out = "";
  let pen = false;
  for (const [x, y] of points) {
    if (y === null) {
      pen = false;
      continue;
    }
    out += `${pen ? "L" : "M"}${x.toFixed(1)},${y.toFixed(1)} `;
    pen = true;
  }
  return out.trim();
}

/**
 * A slice's stored usage over time (GET /slices/{id}/usage), drawn as a
 * small SVG: the memory used (solid) against the quota (dashed), and, where
 * measured, a strip of the GPU time share achieved against the share set
 * and one of the interference. Fetched again whenever `refresh` changes
 * (the page's polling brings a new report). The summary line is the
 * chart's text alternative.
 */
export function UsageChart({
  sliceId,
  refresh,
  computePercent,
  hideEmpty = false,
}: {
  sliceId: number;
  refresh?: unknown;
  computePercent?: number;
  hideEmpty?: boolean;
}) {
  const { data, error } = usePoll(() => api<UsageHistory>("GET", `/slices/${sliceId}/usage`), [sliceId, refresh]);
  if (error) return <p class="muted small">Usage over time unavailable: {error}</p>;
  if (!data) return null;
  const items = data.items;
  if (items.length === 0) return hideEmpty ? null : <p class="muted small" data-testid="usage-chart-empty">No usage stored yet.</p>;
  const summary = usageSummary(items, computePercent);
  const w = 320;
  const memH = 64;
  const stripH = 28;
  const gap = 6;
  const t0 = Date.parse(items[0].reported_at);
  const span = Math.max(1, Date.parse(items[items.length - 1].reported_at) - t0);
  const x = (p: UsagePoint) => (items.length === 1 ? w : ((Date.parse(p.reported_at) - t0) / span) * w);
  const cap = Math.max(1, ...items.map((p) => Math.max(p.used_bytes, p.quota_bytes ?? 0)));
  const memY = (b: number) => memH - (b / cap) * (memH - 2) - 1;
  const shares = items.some((p) => p.share_achieved_percent !== null);
  const interference = items.some((p) => p.interference !== null);
  const maxInterference = Math.max(1.5, ...items.map((p) => p.interference ?? 0));
  let top = memH + gap;
  const shareTop = shares ? top : 0;
  if (shares) top += stripH + gap;
  const intTop = interference ? top : 0;
  if (interference) top += stripH + gap;
  const h = top - gap;
  const stripY = (base: number, frac: number) => base + stripH - Math.min(1, Math.max(0, frac)) * (stripH - 2) - 1;
  const used = linePath(items.map((p) => [x(p), memY(p.used_bytes)]));
  const quota = linePath(items.map((p) => [x(p), p.quota_bytes === null ? null : memY(p.quota_bytes)]));
  const share = linePath(items.map((p) => [x(p), p.share_achieved_percent === null ? null : stripY(shareTop, p.share_achieved_percent / 100)]));
  const inter = linePath(items.map((p) => [x(p), p.interference === null ? null : stripY(intTop, (p.interference - 1) / (maxInterference - 1))]));
  const dot = items.length === 1;
  return (
    <figure class="usage-chart" data-testid="usage-chart" data-points={items.length}>
      <svg width={w} height={h} viewBox={`-2 -2 ${w + 4} ${h + 4}`} role="img" aria-labelledby={`usage-chart-title-${sliceId}`}>
        <title id={`usage-chart-title-${sliceId}`}>{`Slice ${sliceId} usage over time: ${summary}`}</title>
        <rect x="0" y="0" width={w} height={memH} class="usage-frame" />
        {quota && <path d={quota} class="usage-quota" />}
        <path d={used} class="usage-used" data-series="used" />
        {dot && <circle cx={w} cy={memY(items[0].used_bytes)} r="2.5" class="usage-dot" />}
        {shares && (
          <>
            <rect x="0" y={shareTop} width={w} height={stripH} class="usage-frame" />
            {computePercent !== undefined && (
              <line x1="0" x2={w} y1={stripY(shareTop, computePercent / 100)} y2={stripY(shareTop, computePercent / 100)} class="usage-quota" />
            )}
            <path d={share} class="usage-share" data-series="share" />
          </>
        )}
        {interference && (
          <>
            <rect x="0" y={intTop} width={w} height={stripH} class="usage-frame" />
            <path d={inter} class="usage-interference" data-series="interference" />
          </>
        )}
      </svg>
      <figcaption class="small" data-testid="usage-chart-summary">
        {summary}
        <span class="usage-legend" aria-hidden="true">
          {" "}
          <span class="key-used">— used</span> <span class="key-quota">- - quota</span>
          {shares && <span class="key-share"> — time share (0–100%)</span>}
          {interference && <span class="key-interference"> — interference (1–{maxInterference.toFixed(1)}x)</span>}
        </span>
      </figcaption>
    </figure>
  );
}

/**
 * A slice's measured usage (the hook's report the agent sends with each
 * heartbeat): memory used, peak and quota, the quota's and the driver's
 * OOMs, and a chart of the stored reports over time (UsageChart), fetched
 * again when the page's polling brings a new report.
 */
export function SliceUsage({ slice }: { slice: Slice }) {
  const h = slice.hook;
  if (!h)
    return (
      <div data-testid="slice-usage">
        <p class="muted">No usage reported yet (the hook reports once a process of the task uses the GPU).</p>
        <UsageChart sliceId={slice.id} refresh={slice.state} computePercent={slice.compute_percent} hideEmpty />
      </div>
    );
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
      <h3 class="small-head">Over time</h3>
      <UsageChart sliceId={slice.id} refresh={h.reported_at} computePercent={slice.compute_percent} />
    </div>
  );
}

/**
 * A live slice's usage over time behind a disclosure (the slices page lists
 * many slices: each chart is fetched only while its disclosure is open).
 */
export function UsageOverTime({ slice }: { slice: Slice }) {
  const [open, setOpen] = useState(false);
  return (
    <details class="usage-details" data-usage-details={slice.id} onToggle={(e) => setOpen((e.currentTarget as HTMLDetailsElement).open)}>
      <summary>usage over time</summary>
      {open && <UsageChart sliceId={slice.id} refresh={slice.hook?.reported_at} computePercent={slice.compute_percent} />}
    </details>
  );
}
