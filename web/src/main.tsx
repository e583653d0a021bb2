// The HeteroFlow console's shell: sign-in, the header with who-am-I and
// sign-out, the navigation and the hash router (#/tasks, #/slices ...), so
// hf-server needs no fallback route. Pages live in pages/.
import { render } from "preact";
import { useEffect, useState } from "preact/hooks";
import { api, ApiError, getToken, setToken, setUnauthorizedHandler, type WhoAmI } from "./api";
import { ErrorNote, Page } from "./ui";
import { TaskCreate, TaskDetail, TaskList } from "./pages/tasks";
import { SlicesPage } from "./pages/slices";
import { NodesPage } from "./pages/nodes";
import { StatsPage } from "./pages/stats";
import { HistoryPage } from "./pages/history";
import { AdminPage } from "./pages/admin";
import { DefragPage } from "./pages/defrag";
import { AdvicePage } from "./pages/advice";
import "./style.css";

function useHash(): string {
  const [hash, setHash] = useState(location.hash || "#/tasks");
  useEffect(() => {
    const on = () => setHash(location.hash || "#/tasks");
    addEventListener("hashchange", on);
    return () => removeEventListener("hashchange", on);
  }, []);
  return hash;
}

function SignIn({ onSignedIn }: { onSignedIn: (who: WhoAmI) => void }) {
  const [token, setTok] = useState("");
  const [error, setError] = useState<string | null>(null);
  const [busy, setBusy] = useState(false);
  async function submit(e: Event) {
    e.preventDefault();
    const t = token.trim();
    if (!t) {
      setError("enter a token");
      return;
    }
    setBusy(true);
    try {
      const who = await api<WhoAmI>("GET", "/whoami", undefined, t);
      setToken(t);
      onSignedIn(who);
    } catch (err) {
      setError(err instanceof ApiError ? err.describe() : String(err));
    } finally {
      setBusy(false);
    }
  }
  return (
    <main id="main" class="signin">
      <form class="card signin-card" onSubmit={submit} noValidate aria-labelledby="signin-title">
        <h1 id="signin-title">HeteroFlow console</h1>
        <p class="muted">Sign in with an API token (admin, tenant-admin or user). It is kept in this tab only.</p>
        <div class="field">
          <label for="signin-token">API token</label>
          <input
            id="signin-token"
            name="token"
            type="password"
            autoComplete="off"
            value={token}
            aria-invalid={error ? "true" : undefined}
            aria-describedby="signin-error"
            onInput={(e) => {
              setTok((e.target as HTMLInputElement).value);
              setError(null);
            }}
          />
          <div id="signin-error" class="field-error" role="alert" aria-live="assertive">
            {error ?? ""}
          </div>
        </div>
        <button type="submit" class="primary" disabled={busy}>
          {busy ? "Signing in…" : "Sign in"}
        </button>
      </form>
    </main>
  );
}

// `roles`: only these roles see the entry (the API refuses the others).
const NAV: { href: string; label: string; roles?: WhoAmI["role"][] }[] = [
  { href: "#/tasks", label: "Tasks" },
  { href: "#/slices", label: "Slices" },
  { href: "#/nodes", label: "Nodes", roles: ["admin"] },
  { href: "#/stats", label: "Stats" },
  { href: "#/history", label: "History" },
  { href: "#/advice", label: "Advice", roles: ["admin", "tenant-admin"] },
  { href: "#/defrag", label: "Defrag", roles: ["admin"] },
  { href: "#/admin", label: "Admin", roles: ["admin"] },
];

function Route({ hash, who }: { hash: string; who: WhoAmI }) {
  const path = hash.replace(/^#/, "").split("?")[0];
  const isAdmin = who.role === "admin";
  if (path === "/tasks/new") return <TaskCreate who={who} />;
  const m = path.match(/^\/tasks\/(\d+)$/);
  if (m) return <TaskDetail id={Number(m[1])} />;
  if (path === "/slices") return <SlicesPage who={who} />;
  if (path === "/nodes" && isAdmin) return <NodesPage />;
  if (path === "/stats") return <StatsPage who={who} />;
  if (path === "/history") return <HistoryPage />;
  if (path === "/admin" && isAdmin) return <AdminPage />;
  if (path === "/defrag" && isAdmin) return <DefragPage />;
  if (path === "/advice") {
    if (isAdmin || who.role === "tenant-admin") return <AdvicePage />;
    return (
      <Page title="Not available">
        <p>This page is for platform admins and tenant admins.</p>
      </Page>
    );
  }
  if (path === "/nodes" || path === "/admin" || path === "/defrag")
    return (
      <Page title="Not available">
        <p>This page is for platform admins.</p>
      </Page>
    );
  return <TaskList who={who} />;
}

function App() {
  const [who, setWho] = useState<WhoAmI | null>(null);
  const [checking, setChecking] = useState(!!getToken());
  const [error, setError] = useState<string | null>(null);
  const [menuOpen, setMenuOpen] = useState(false);
  const hash = useHash();

  function signOut() {
    setToken(null);
    setWho(null);
  }
  useEffect(() => {
    setUnauthorizedHandler(signOut);
    if (!getToken()) return;
    api<WhoAmI>("GET", "/whoami")
      .then(setWho)
      .catch((e) => {
        setToken(null);
        setError(e instanceof ApiError ? e.describe() : String(e));
      })
      .finally(() => setChecking(false));
  }, []);
  useEffect(() => {
    setMenuOpen(false);
    document.getElementById("page-title")?.focus({ preventScroll: true });
  }, [hash]);

  if (checking) return <p class="muted pad">Loading…</p>;
  if (!who)
    return (
      <>
        <ErrorNote error={error} />
        <SignIn onSignedIn={(w) => { setError(null); setWho(w); }} />
      </>
    );
  const active = "#" + (hash.replace(/^#/, "").split("/")[1] ? "/" + hash.replace(/^#/, "").split("/")[1] : "/tasks");
  return (
    <>
      <a class="skip-link" href="#main" onClick={(e) => { e.preventDefault(); document.getElementById("main")?.focus(); }}>
        Skip to content
      </a>
      <header class="topbar">
        <a class="brand" href="#/tasks">HeteroFlow</a>
        <button
          type="button"
          class="menu-toggle"
          aria-expanded={menuOpen}
          aria-controls="primary-nav"
          onClick={() => setMenuOpen(!menuOpen)}
        >
          Menu
        </button>
        <nav id="primary-nav" class={menuOpen ? "open" : ""} aria-label="Primary">
          <ul>
            {NAV.filter((n) => !n.roles || n.roles.includes(who.role)).map((n) => (
              <li key={n.href}>
                <a href={n.href} aria-current={active === n.href ? "page" : undefined}>
                  {n.label}
                </a>
              </li>
            ))}
          </ul>
        </nav>
        <div class="whoami" data-testid="whoami">
          <span class="role">{who.role}</span>
          {who.tenant && <span class="tenant">tenant {who.tenant}</span>}
          <button type="button" class="link-button" onClick={signOut}>
            Sign out
          </button>
        </div>
      </header>
      <main id="main" tabIndex={-1}>
        <Route hash={hash} who={who} />
      </main>
    </>
  );
}

render(<App />, document.getElementById("app")!);
