import { HttpError } from "../http/errors.ts";
import type { Route } from "../http/router.ts";
import type { Caller } from "./keyring.ts";

// Who may call what, in one table. A route that changes what the host runs, stores or deletes for
// every key takes an admin key (403 `admin_only` otherwise); any other route is any key's, for
// itself (its own requests, files, batches and stored responses, counted and limited as its own).
// Admins: a key marked `admin` in API_KEYS_FILE, the Unix socket's caller (its peer is trusted,
// with or without a key), and everyone where no keys are asked, so a desktop without keys sees no
// change. Reads (GET) are any key's and have no row; what a read shows per key is its route's
// (usage, metrics, files, batches). Every other route must have exactly one row, and every row
// a route: `withAccess` checks both when the routes are built, so a new route cannot go unjudged,
// nor a row outlive its route. docs/security.md shows this table (a test compares them).

export type Access = "admin" | "any key";

/** `{base}` stands for any of BASES: the OpenAI-compatible paths' prefixes. */
export type AccessRow = { method: Exclude<Route["method"], "GET">; path: string; access: Access; what: string; why: string };

const BASES = ["", "/v1", "/engines", "/engines/v1", "/engines/llama.cpp", "/engines/llama.cpp/v1", "/anthropic/v1"];

type Judged = Pick<AccessRow, "access" | "what" | "why">;
const INFERENCE: Judged = { access: "any key", what: "inference", why: "the key's own requests, admitted, counted and limited as its own (they load runners as any request does)" };
const FILES: Judged = { access: "any key", what: "files", why: "the key's own, held to its quota; another key's are 404 to it, an admin key reaches all" };
const BATCHES: Judged = { access: "any key", what: "batches", why: "the key's own, held to its quota; another key's are 404 to it, an admin key reaches all" };
const MODEL_PULL: Judged = { access: "admin", what: "pulling a model", why: "it stores it for every key, with the server's registry and Hugging Face credentials" };
const MODEL_DELETE: Judged = { access: "admin", what: "deleting a model", why: "it goes for every key" };

export const ACCESS: AccessRow[] = [
  // The model store, which every key's requests read.
  { method: "POST", path: "/models/create", ...MODEL_PULL },
  { method: "POST", path: "/api/pull", ...MODEL_PULL },
  { method: "POST", path: "/models/load", access: "admin", what: "loading a model archive", why: "it stores a model for every key" },
  { method: "POST", path: "/models/:reference+/tag", access: "admin", what: "tagging a model", why: "a name every key uses would name another model" },
  { method: "POST", path: "/api/copy", access: "admin", what: "copying a model's name", why: "a name every key uses would name another model" },
  { method: "POST", path: "/models/:reference+/push", access: "admin", what: "pushing a model", why: "it writes to a registry with the server's credentials" },
  { method: "DELETE", path: "/models/:reference+", ...MODEL_DELETE },
  { method: "DELETE", path: "/api/delete", ...MODEL_DELETE },
  { method: "DELETE", path: "/models/purge", access: "admin", what: "purging the store", why: "models, blobs and engine builds go for every key" },
  // What runs: the runners' settings, their builds, the runners themselves.
  { method: "POST", path: "/engines/_configure", access: "admin", what: "configuring a model", why: "its runners' settings and build are every key's" },
  { method: "POST", path: "/engines/unload", access: "admin", what: "unloading runners", why: "other keys use them" },
  { method: "POST", path: "/engines/builds", access: "admin", what: "pulling an engine build", why: "a build is a program this host runs" },
  { method: "POST", path: "/engines/builds/default", access: "admin", what: "choosing the default engine build", why: "a build is a program this host runs" },
  { method: "DELETE", path: "/engines/builds/:name+", access: "admin", what: "removing an engine build", why: "a build is a program this host runs" },
  { method: "POST", path: "/engines/install-backend", access: "admin", what: "installing an engine build", why: "a build is a program this host runs" },
  { method: "POST", path: "/engines/uninstall-backend", access: "admin", what: "uninstalling an engine build", why: "a build is a program this host runs" },
  // A key's own requests.
  { method: "POST", path: "{base}/chat/completions", ...INFERENCE },
  { method: "POST", path: "{base}/completions", ...INFERENCE },
  { method: "POST", path: "{base}/embeddings", ...INFERENCE },
  { method: "POST", path: "{base}/messages", ...INFERENCE },
  { method: "POST", path: "{base}/messages/count_tokens", ...INFERENCE },
  { method: "POST", path: "{base}/responses", ...INFERENCE },
  { method: "POST", path: "{base}/rerank", ...INFERENCE },
  { method: "POST", path: "{base}/score", ...INFERENCE },
  { method: "POST", path: "{base}/decisions", ...INFERENCE },
  { method: "POST", path: "{base}/systemone", ...INFERENCE },
  { method: "POST", path: "/tokenize", ...INFERENCE },
  { method: "POST", path: "/detokenize", ...INFERENCE },
  // Ollama's chat and generate with no prompt and keep_alive 0 unload (`ollama stop`): an admin's, checked there.
  { method: "POST", path: "/api/chat", ...INFERENCE },
  { method: "POST", path: "/api/generate", ...INFERENCE },
  { method: "POST", path: "/api/embed", ...INFERENCE },
  { method: "POST", path: "/api/embeddings", ...INFERENCE },
  { method: "POST", path: "/engines/:engine/v1/*", access: "any key", what: "another engine's inference paths", why: "answered 404, this runner serves llama.cpp alone" },
  // Reads with a body.
  { method: "POST", path: "/api/show", access: "any key", what: "reading a model's details", why: "changes nothing" },
  { method: "POST", path: "/engines/fit", access: "any key", what: "reading what a load would take", why: "changes nothing" },
  // A key's own things.
  { method: "DELETE", path: "{base}/responses/:id", access: "any key", what: "stored responses", why: "the key's own; another key's are 404 to it" },
  { method: "POST", path: "{base}/files", ...FILES },
  { method: "DELETE", path: "{base}/files/:id", ...FILES },
  { method: "POST", path: "{base}/batches", ...BATCHES },
  { method: "POST", path: "{base}/batches/:id/cancel", ...BATCHES },
];

/** The refusal of what takes an admin key; `what` says what it is and why it is an admin's. */
export const adminOnly = (what: string, why: string) => new HttpError(403, "permission_error", "admin_only", `${what} takes an admin key: ${why}`);

/** Throws `adminOnly` unless `caller` is an admin: for what a route's body decides (Ollama's unload). */
export function refuseUnlessAdmin(caller: Caller, what: string, why: string): void {
  if (!caller.admin) throw adminOnly(what, why);
}

const matches = (row: AccessRow, route: Route) =>
  row.method === route.method && (row.path.startsWith("{base}") ? BASES.some((base) => base + row.path.slice("{base}".length) === route.path) : row.path === route.path);

/**
 * The routes with ACCESS applied: an admin row's handler refuses any other caller before it reads
 * anything. `refusal` renders that refusal where a dialect answers errors in a shape of its own
 * (Ollama's); by default it is thrown, for the router to render. Throws, so that the server does
 * not start, for a route other than a GET without exactly one row, and for a row without a route.
 */
export function withAccess(routes: Route[], identify: (request: Request) => Caller, refusal: (route: Route, error: HttpError) => Response | undefined = () => undefined): Route[] {
  const used = new Set<AccessRow>();
  const judged = routes.map((route) => {
    if (route.method === "GET") return route;
    const rows = ACCESS.filter((row) => matches(row, route));
    if (rows.length !== 1) throw new Error(`route ${route.method} ${route.path} has ${rows.length} rows in the access table (src/keys/access.ts): it needs one`);
    const row = rows[0]!;
    used.add(row);
    if (row.access !== "admin") return route;
    const refused = adminOnly(row.what, row.why);
    return {
      ...route,
      handle: (request: Parameters<Route["handle"]>[0]) => {
        if (identify(request).admin) return route.handle(request);
        const shaped = refusal(route, refused);
        if (shaped) return shaped;
        throw refused;
      },
    };
  });
  const unused = ACCESS.filter((row) => !used.has(row));
  if (unused.length > 0) throw new Error(`the access table (src/keys/access.ts) has rows no route has: ${unused.map((r) => `${r.method} ${r.path}`).join(", ")}`);
  return judged;
}
