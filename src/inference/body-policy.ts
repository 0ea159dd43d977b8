import { badRequest } from "../http/errors.ts";
import { isAddress, isPublicAddress } from "./media/address.ts";
import { isInline, mediaRefs, type MediaKind, type MediaRef } from "./media/refs.ts";

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

/**
 * Refuses (400) a body that asks llama-server for something no client of ours may ask. Returns the
 * media given by http(s) URL that may be fetched (remote media allowed, and the URL names no
 * address that is not public): the caller fetches them (see media/fetch.ts) before forwarding.
 */
export function policeBody(body: unknown, policy: BodyPolicy): MediaRef[] {
  if (typeof body !== "object" || body === null) return [];
  const fields = body as Record<string, unknown>;
  for (const rule of RULES) {
    if (rule.field in fields && rule.refuse(fields[rule.field])) {
      throw badRequest("field_not_allowed", `${rule.field} ${rule.why} (got ${JSON.stringify(fields[rule.field])})`);
    }
  }
  return remoteMedia(body, policy);
}

/**
 * The media `body` gives by http(s) URL that may be fetched; 400 for one that may not (remote
 * media off, an address that is not public, a scheme never fetched).
 */
export function remoteMedia(body: unknown, policy: BodyPolicy): MediaRef[] {
  const remote: MediaRef[] = [];
  for (const ref of mediaRefs(body)) {
    const value = ref.holder[ref.key] as string;
    if (isInline(value)) continue;
    const why = refusedMedia(value, policy);
    if (why) throw badRequest("media_not_allowed", `media URL refused: ${why}`);
    remote.push(ref);
  }
  return remote;
}

/**
 * Why a media URL may not be fetched, or undefined. A name is judged later, by the addresses it
 * resolves to, where the connection is made; an address written in the URL is judged here.
 */
export function refusedMedia(url: string, policy: BodyPolicy): string | undefined {
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    return "not a URL";
  }
  if (parsed.protocol !== "http:" && parsed.protocol !== "https:") return `${parsed.protocol} URLs are never fetched`;
  if (!policy.allowRemoteMedia) return "remote media are off (ALLOW_REMOTE_MEDIA); send the media as a data: URL";
  if (isAddress(parsed.hostname) && !isPublicAddress(parsed.hostname)) return `${parsed.hostname} is not a public address`;
  return undefined;
}

/** What a model without a projector is asked to read, by the media's kind; files are llama-server's to refuse (400). */
const UNREADABLE: Partial<Record<MediaKind, string>> = { image: "images", audio: "audio", video: "video" };

/**
 * Refuses (400) images, audio and video sent to a model pulled without a multimodal projector:
 * llama-server answers them with a 500 (server_error) whose hint names its own flag.
 */
export function refuseUnreadableMedia(body: unknown, model: string): void {
  for (const { kind } of mediaRefs(body)) {
    const what = UNREADABLE[kind];
    if (what) throw badRequest(`${what}_not_supported`, `model ${model} reads no ${what}: it was pulled without a multimodal projector`);
  }
}
