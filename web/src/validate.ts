// The task form's client-side rules (docs/CONTRACT.md sections 4 and 14), in one
// place: each returns the message shown next to its field, or null.
// The server stays the authority: its 400s are shown next to the field
// they name too.

export function memoryError(v: string, computeGiven: boolean): string | null {
  const s = v.trim();
  if (s === "") return computeGiven ? null : "Give the slice's memory (MB), or a compute share.";
  if (!/^\d+$/.test(s)) return "Memory must be a whole number of MB.";
  const n = Number(s);
  if (n < 32) return "Memory must be at least 32 MB.";
  if (n % 32 !== 0) {
    const lo = Math.floor(n / 32) * 32;
    return `Memory must be a multiple of 32 MB (try ${lo} or ${lo + 32}).`;
  }
  return null;
}

export function computeError(v: string): string | null {
  const s = v.trim();
  if (s === "") return null; // blank = unlimited
  if (!/^-?\d+(\.\d+)?$/.test(s)) return "Compute must be a whole percent from 1 to 100.";
  if (!/^\d+$/.test(s)) return "Compute must be a whole percent (no fractions), 1 to 100.";
  const n = Number(s);
  if (n < 1 || n > 100) return "Compute must be between 1 and 100 percent.";
  return null;
}

export function gpuCountError(v: string): string | null {
  const s = v.trim();
  if (!/^\d+$/.test(s) || Number(s) < 1) return "GPU count must be a whole number, at least 1.";
  if (Number(s) > 64) return "GPU count must be at most 64.";
  return null;
}

export function nameError(v: string): string | null {
  if (v.trim() === "") return "A task needs a name.";
  if (v.length > 4096) return "Name is too long (4096 bytes at most).";
  return null;
}

/** Parses KEY=VALUE lines; returns the object or the first bad line's message. */
export function parseEnv(v: string): { env: Record<string, string> } | { error: string } {
  const env: Record<string, string> = {};
  const lines = v.split("\n");
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i].trim();
    if (line === "" || line.startsWith("#")) continue;
    const eq = line.indexOf("=");
    if (eq <= 0) return { error: `Line ${i + 1}: write NAME=value.` };
    const key = line.slice(0, eq).trim();
    if (!/^[A-Za-z_][A-Za-z0-9_]*$/.test(key)) return { error: `Line ${i + 1}: "${key}" is not a variable name.` };
    env[key] = line.slice(eq + 1);
  }
  return { env };
}
