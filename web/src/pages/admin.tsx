// Admin (platform admin only; the nav hides it for others): tenants,
// shared groups, tokens (the secret is shown once, right after creation),
// and the MIG command rows with stuck ones flagged.
import { useState } from "preact/hooks";
import { api, ApiError, type Group, type List, type SliceRequest, type Tenant, type TokenInfo } from "../api";
import { ErrorNote, fmtTime, Page, Table, usePoll } from "../ui";

function errText(e: unknown): string {
  return e instanceof ApiError ? e.describe() : String(e);
}

function Tenants({ groups, onChange }: { groups: Group[]; onChange: () => void }) {
  const tenants = usePoll(() => api<List<Tenant>>("GET", "/tenants?limit=1000"), []);
  const [name, setName] = useState("");
  const [group, setGroup] = useState("");
  const [error, setError] = useState<string | null>(null);
  const [assignError, setAssignError] = useState<string | null>(null);
  async function create(e: Event) {
    e.preventDefault();
    setError(null);
    try {
      await api("POST", "/tenants", { name: name.trim(), ...(group.trim() ? { shared_group: group.trim() } : {}) });
      setName("");
      setGroup("");
      await tenants.reload();
      onChange();
    } catch (err) {
      setError(errText(err));
    }
  }
  async function assign(t: string, g: string) {
    setAssignError(null);
    try {
      await api("PATCH", `/tenants/${encodeURIComponent(t)}`, { shared_group: g || null });
      await tenants.reload();
      onChange();
    } catch (err) {
      setAssignError(errText(err));
    }
  }
  return (
    <section class="card" aria-labelledby="tenants-h">
      <h2 id="tenants-h">Tenants</h2>
      <form class="inline-form" onSubmit={create} noValidate>
        <div class="field">
          <label for="tenant-name">Name</label>
          <input id="tenant-name" value={name} onInput={(e) => setName((e.target as HTMLInputElement).value)} aria-describedby="tenant-error" />
        </div>
        <div class="field">
          <label for="tenant-group">Shared group (optional)</label>
          <input id="tenant-group" value={group} onInput={(e) => setGroup((e.target as HTMLInputElement).value)} />
        </div>
        <button type="submit" class="primary">Create tenant</button>
      </form>
      <div id="tenant-error" class="field-error" role="alert">{error ?? ""}</div>
      <ErrorNote error={tenants.error ?? assignError} />
      {tenants.data && (
        <Table caption="Tenants">
          <thead>
            <tr><th scope="col">name</th><th scope="col">shared group</th><th scope="col">created</th></tr>
          </thead>
          <tbody>
            {tenants.data.items.map((t) => (
              <tr key={t.name}>
                <td>{t.name}</td>
                <td>
                  <label class="sr-only" for={`assign-${t.name}`}>Shared group of {t.name}</label>
                  <select id={`assign-${t.name}`} value={t.shared_group ?? ""} onChange={(e) => void assign(t.name, (e.target as HTMLSelectElement).value)}>
                    <option value="">(none)</option>
                    {groups.map((g) => <option key={g.name} value={g.name}>{g.name}</option>)}
                  </select>
                </td>
                <td class="nowrap">{fmtTime(t.created_at)}</td>
              </tr>
            ))}
          </tbody>
        </Table>
      )}
    </section>
  );
}

function Groups({ groups, error, reload }: { groups: Group[]; error: string | null; reload: () => void }) {
  const [name, setName] = useState("");
  const [err, setErr] = useState<string | null>(null);
  async function create(e: Event) {
    e.preventDefault();
    setErr(null);
    try {
      await api("POST", "/groups", { name: name.trim() });
      setName("");
      reload();
    } catch (x) {
      setErr(errText(x));
    }
  }
  return (
    <section class="card" aria-labelledby="groups-h">
      <h2 id="groups-h">Shared groups</h2>
      <p class="muted small">Tenants of one group may share a GPU. Assign a tenant in the tenants table.</p>
      <form class="inline-form" onSubmit={create} noValidate>
        <div class="field">
          <label for="group-name">Name</label>
          <input id="group-name" value={name} onInput={(e) => setName((e.target as HTMLInputElement).value)} />
        </div>
        <button type="submit" class="primary">Create group</button>
      </form>
      <ErrorNote error={err ?? error} />
      {groups.length === 0 ? <p class="muted">No groups.</p> : (
        <ul class="plain">
          {groups.map((g) => <li key={g.name}><strong>{g.name}</strong>: {g.tenants.join(", ") || "no tenants"}</li>)}
        </ul>
      )}
    </section>
  );
}

function Tokens() {
  const tokens = usePoll(() => api<List<TokenInfo>>("GET", "/tokens?limit=1000"), []);
  const [role, setRole] = useState("user");
  const [tenant, setTenant] = useState("");
  const [node, setNode] = useState("");
  const [desc, setDesc] = useState("");
  const [secret, setSecret] = useState<TokenInfo | null>(null);
  const [error, setError] = useState<string | null>(null);
  async function create(e: Event) {
    e.preventDefault();
    setError(null);
    const body: Record<string, unknown> = { role, description: desc };
    if (role === "user" || role === "tenant-admin") body.tenant = tenant.trim();
    if (role === "node" && node.trim()) body.node = node.trim();
    try {
      const t = await api<TokenInfo>("POST", "/tokens", body);
      setSecret(t);
      setDesc("");
      await tokens.reload();
    } catch (x) {
      setError(errText(x));
    }
  }
  async function revoke(id: number) {
    setError(null);
    try {
      await api("DELETE", `/tokens/${id}`);
      await tokens.reload();
    } catch (x) {
      setError(errText(x));
    }
  }
  return (
    <section class="card" aria-labelledby="tokens-h">
      <h2 id="tokens-h">Tokens</h2>
      <form class="inline-form" onSubmit={create} noValidate>
        <div class="field">
          <label for="token-role">Role</label>
          <select id="token-role" value={role} onChange={(e) => setRole((e.target as HTMLSelectElement).value)}>
            <option value="user">user</option>
            <option value="tenant-admin">tenant-admin</option>
            <option value="admin">admin</option>
            <option value="node">node</option>
          </select>
        </div>
        {(role === "user" || role === "tenant-admin") && (
          <div class="field">
            <label for="token-tenant">Tenant</label>
            <input id="token-tenant" value={tenant} onInput={(e) => setTenant((e.target as HTMLInputElement).value)} />
          </div>
        )}
        {role === "node" && (
          <div class="field">
            <label for="token-node">Bound to node (optional)</label>
            <input id="token-node" value={node} onInput={(e) => setNode((e.target as HTMLInputElement).value)} />
          </div>
        )}
        <div class="field">
          <label for="token-desc">Description</label>
          <input id="token-desc" value={desc} onInput={(e) => setDesc((e.target as HTMLInputElement).value)} />
        </div>
        <button type="submit" class="primary">Create token</button>
      </form>
      <ErrorNote error={error ?? tokens.error} />
      {secret?.token && (
        <div class="secret" role="status" aria-live="polite">
          <p>
            Token {secret.id} ({secret.role}{secret.tenant ? ` of ${secret.tenant}` : ""}) created. Copy the secret now: it is not shown again.
          </p>
          <label for="token-secret">Secret</label>
          <input id="token-secret" class="mono" readOnly value={secret.token} onFocus={(e) => (e.target as HTMLInputElement).select()} />
          <button type="button" onClick={() => setSecret(null)}>Done</button>
        </div>
      )}
      {tokens.data && (
        <Table caption="Tokens">
          <thead>
            <tr><th scope="col">id</th><th scope="col">role</th><th scope="col">tenant / node</th><th scope="col">description</th><th scope="col">created</th><th scope="col">revoked</th><th scope="col"><span class="sr-only">actions</span></th></tr>
          </thead>
          <tbody>
            {tokens.data.items.map((t) => (
              <tr key={t.id} class={t.revoked_at ? "revoked" : ""}>
                <td>{t.id}</td>
                <td>{t.role}</td>
                <td>{t.tenant ?? t.node ?? "—"}</td>
                <td>{t.description}</td>
                <td class="nowrap">{fmtTime(t.created_at)}</td>
                <td class="nowrap">{fmtTime(t.revoked_at)}</td>
                <td>
                  {!t.revoked_at && (
                    <button type="button" class="danger small-button" onClick={() => void revoke(t.id)} aria-label={`Revoke token ${t.id}`}>
                      Revoke
                    </button>
                  )}
                </td>
              </tr>
            ))}
          </tbody>
        </Table>
      )}
    </section>
  );
}

function MigRequests() {
  const { data, error } = usePoll(() => api<List<SliceRequest>>("GET", "/slice-requests?limit=1000"), [], 5000);
  const stuck = data?.items.filter((r) => r.state === "stuck").length ?? 0;
  return (
    <section class="card" aria-labelledby="mig-h">
      <h2 id="mig-h">MIG commands</h2>
      <ErrorNote error={error} />
      {stuck > 0 && <p class="lost-flag" role="status">{stuck} MIG command(s) stuck: HARDWARE STATE UNKNOWN, check the node.</p>}
      {data && data.items.length === 0 && <p class="muted">No MIG commands.</p>}
      {data && data.items.length > 0 && (
        <Table caption="MIG command rows">
          <thead>
            <tr><th scope="col">id</th><th scope="col">node / GPU</th><th scope="col">action</th><th scope="col">profile</th><th scope="col">slice / task</th><th scope="col">state</th><th scope="col">device</th><th scope="col">error</th><th scope="col">created</th><th scope="col">finished</th></tr>
          </thead>
          <tbody>
            {data.items.map((r) => (
              <tr key={r.id} class={r.state === "stuck" ? "stuck" : ""}>
                <td>{r.id}</td>
                <td>{r.node_id} / {r.gpu_index}</td>
                <td>{r.action}</td>
                <td>{r.profile}</td>
                <td>{r.slice_id ?? "—"} / {r.task_id ?? "—"}</td>
                <td>{r.state === "stuck" ? <strong class="lost-flag">STUCK</strong> : r.state}</td>
                <td class="mono">{r.device_id ?? "—"}</td>
                <td>{r.error || "—"}</td>
                <td class="nowrap">{fmtTime(r.created_at)}</td>
                <td class="nowrap">{fmtTime(r.finished_at)}</td>
              </tr>
            ))}
          </tbody>
        </Table>
      )}
    </section>
  );
}

export function AdminPage() {
  const groups = usePoll(() => api<List<Group>>("GET", "/groups?limit=1000"), []);
  return (
    <Page title="Admin">
      <div class="admin-grid">
        <Tenants groups={groups.data?.items ?? []} onChange={() => void groups.reload()} />
        <Groups groups={groups.data?.items ?? []} error={groups.error} reload={() => void groups.reload()} />
      </div>
      <Tokens />
      <MigRequests />
    </Page>
  );
}
