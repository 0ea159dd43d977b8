import { badRequest } from "../http/errors.ts";
import { isLoopback } from "../http/guard.ts";

// llama-server trusts its callers, and we are its only caller: what a request body may ask of it
// is policed here, before it is forwarded. One table of refused values, each with why it is there.
// (The slot save/restore endpoints, which take file names, are never forwarded: only the paths of
// our route tables reach a runner.)

type Rule = { field: string; refuse: (value: unknown) => boolean; why: string };

const isNumber = (value: unknown): value is number => typeof value === "number";
const outside = (min: number, max: number) => (value: unknown) => !isNumber(value) || !Number.isInteger(value) || value < min || value > max;

const RULES: Rule[] = [
  // A negative n_discard reaches an out-of-bounds memory move in the context shift (CVE-2026-21869).
  { field: "n_discard", refuse: (v) => !isNumber(v) || v < 0, why: "must be 0 or more" },
  // n_keep below -1 is read as a huge token count when the context is shifted.
  { field: "n_keep", refuse: (v) => !isNumber(v) || v < -1, why: "must be -1 or more" },
  // Each probability asked for costs a sort over the vocabulary per token: bounded as OpenAI's top_logprobs.
  { field: "n_probs", refuse: outside(0, 20), why: "must be an integer from 0 to 20" },
  // Slots are the scheduler's to hand out; a request pinning one would bypass its queue.
  { field: "id_slot", refuse: (v) => v !== -1, why: "slots are assigned by the scheduler" },
  // Several completions per request multiply one request's work beyond what its lease accounts for.
  { field: "n_cmpl", refuse: outside(1, 8), why: "must be an integer from 1 to 8" },
  { field: "n", refuse: outside(1, 8), why: "must be an integer from 1 to 8" },
];

export type BodyPolicy = { allowRemoteMedia: boolean };

/** Refuses (400) a body that asks llama-server for something no client of ours may ask. */
export function policeBody(body: unknown, policy: BodyPolicy): void {
  if (typeof body !== "object" || body === null) return;
  const fields = body as Record<string, unknown>;
  for (const rule of RULES) {
    if (rule.field in fields && rule.refuse(fields[rule.field])) {
      throw badRequest("field_not_allowed", `${rule.field} ${rule.why} (got ${JSON.stringify(fields[rule.field])})`);
    }
  }
  for (const url of mediaUrls(fields.messages)) {
    const why = refusedMedia(url, policy);
    if (why) throw badRequest("media_not_allowed", `media URL refused: ${why}`);
  }
}

/** The URLs of media parts in chat messages: OpenAI's `image_url`, `input_audio`, `file`, and Anthropic's image sources. */
function* mediaUrls(messages: unknown): Generator<string> {
  if (!Array.isArray(messages)) return;
  for (const message of messages) {
    const content = (message as { content?: unknown } | null)?.content;
    if (!Array.isArray(content)) continue;
    for (const part of content as Record<string, unknown>[]) {
      if (typeof part !== "object" || part === null) continue;
      const image = part.image_url as { url?: unknown } | string | undefined;
      const candidates = [
        typeof image === "string" ? image : image?.url,
        (part.source as { url?: unknown } | undefined)?.url,
        (part.input_audio as { url?: unknown } | undefined)?.url,
        (part.file as { file_url?: unknown } | undefined)?.file_url,
      ];
      for (const candidate of candidates) if (candidate !== undefined) yield String(candidate);
    }
  }
}

/** Why a media URL may not be sent on, or undefined. `data:` always passes. */
export function refusedMedia(url: string, policy: BodyPolicy): string | undefined {
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    return "not a URL";
  }
  if (parsed.protocol === "data:") return undefined;
  if (parsed.protocol !== "http:" && parsed.protocol !== "https:") return `${parsed.protocol} URLs are never fetched`;
  if (!policy.allowRemoteMedia) return "remote media are off (ALLOW_REMOTE_MEDIA); send the media as a data: URL";
  if (isLoopback(parsed.hostname) || isPrivateAddress(parsed.hostname)) return `${parsed.hostname} is a local or private address`;
  return undefined;
}

/** Private, link-local and unspecified addresses, IPv4 and IPv6 (as written in a URL). */
export function isPrivateAddress(host: string): boolean {
  const name = host.toLowerCase().replace(/^\[(.*)\]$/, "$1");
  const v4 = /^(\d{1,3})\.(\d{1,3})\.(\d{1,3})\.(\d{1,3})$/.exec(name);
  if (v4) {
    const [a, b] = [Number(v4[1]), Number(v4[2])];
    return a === 10 || a === 0 || (a === 172 && b >= 16 && b <= 31) || (a === 192 && b === 168) || (a === 169 && b === 254) || (a === 100 && b >= 64 && b <= 127);
  }
  if (name.includes(":")) return name === "::" || /^f[cd]/.test(name) || /^fe[89ab]/.test(name) || name.startsWith("::ffff:");
  return name.endsWith(".local") || name.endsWith(".internal") || !name.includes(".");
}
