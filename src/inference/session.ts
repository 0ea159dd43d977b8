import { createHash } from "node:crypto";

// Which agent session a request belongs to, which shared start its prompt has, and how its
// conversation opened: what the runner's slot table (src/scheduler/affinity.ts) places requests
// by. Agents name their session themselves, each in its own way; a request that names none but has
// a start is placed as an anonymous conversation, found again by its opening; one with neither is
// placed by llama-server, as before.

/**
 * Headers that name a session: Claude Code's, then Codex's (both spellings seen; pi's and Qwen
 * Code's as launch sets them up are `session_id`), then pi's (and opencode's) other one. The pool's
 * gateway sticks a session to its replica by the same headers (deploy/haproxy.cfg).
 */
export const SESSION_HEADERS = ["x-claude-code-session-id", "session-id", "session_id", "x-session-affinity"];

/** A session's name as kept (a client may send anything: bounded, so a table of them stays small). */
const MAX_SESSION_CHARS = 200;

/**
 * The session a request belongs to, or undefined: a session header, else OpenAI's
 * `prompt_cache_key` (Codex sets it to its session id), Anthropic's `metadata.user_id`, OpenAI's
 * `user`. Names are the caller's own: the table keeps them per key (see `sessionOf`'s use).
 */
export function sessionOf(headers: Headers, body: unknown): string | undefined {
  for (const name of SESSION_HEADERS) {
    const value = headers.get(name);
    if (value) return value.slice(0, MAX_SESSION_CHARS);
  }
  if (!body || typeof body !== "object") return undefined;
  const fields = body as { prompt_cache_key?: unknown; metadata?: { user_id?: unknown } | null; user?: unknown };
  for (const value of [fields.prompt_cache_key, fields.metadata?.user_id, fields.user]) {
    if (typeof value === "string" && value.length > 0) return value.slice(0, MAX_SESSION_CHARS);
  }
  return undefined;
}

/**
 * A digest of what a prompt starts with before any conversation: the system prompt (Anthropic's
 * `system`, Responses' `instructions`, the leading system or developer messages of a chat or of
 * Responses' input) and the tools. Sessions of one agent opened in one folder send the same: their
 * prompts share that start, which the slot table lets one of them process for all. Undefined when
 * there is none (a bare completion): such requests never wait for one another.
 */
export function prefixOf(body: unknown): string | undefined {
  if (!body || typeof body !== "object") return undefined;
  const fields = body as { system?: unknown; instructions?: unknown; tools?: unknown; messages?: unknown; input?: unknown };
  const leading = leadingSystem(fields.messages) ?? leadingSystem(fields.input);
  // Asked of every request: one with none of the parts (a bare completion, most chats) makes nothing.
  if (absent(fields.system) && absent(fields.instructions) && leading === undefined && absent(fields.tools)) return undefined;
  return createHash("sha256").update(JSON.stringify([fields.system, fields.instructions, leading, fields.tools])).digest("hex").slice(0, 32);
}

const absent = (part: unknown) => part === undefined || (Array.isArray(part) && part.length === 0);

/**
 * A digest of a conversation's first message after its start (Responses' `input` when a string):
 * how a client that names no session finds the slot of its conversation on its next turn (it sends
 * the same first message again). Undefined when there is none.
 */
export function openingOf(body: unknown): string | undefined {
  if (!body || typeof body !== "object") return undefined;
  const { messages, input } = body as { messages?: unknown; input?: unknown };
  if (typeof input === "string") return digest(input);
  const list = Array.isArray(messages) ? messages : Array.isArray(input) ? input : undefined;
  const first = list?.[leadingSystem(list)?.length ?? 0];
  return first === undefined ? undefined : digest(JSON.stringify(first));
}

const digest = (text: string) => createHash("sha256").update(text).digest("hex").slice(0, 32);

/** The system and developer messages a list of messages or input items starts with (undefined: none). */
function leadingSystem(list: unknown): unknown[] | undefined {
  if (!Array.isArray(list)) return undefined;
  let count = 0;
  while (count < list.length && isSystem(list[count])) count++;
  // Counted first: a conversation that opens with the user's message (most) makes no list.
  return count > 0 ? list.slice(0, count) : undefined;
}

function isSystem(item: unknown): boolean {
  const role = item && typeof item === "object" ? (item as { role?: unknown }).role : undefined;
  return role === "system" || role === "developer";
}
