import * as z from "zod";
import { upstreamFailure } from "../errors.ts";
import { rangeAnswer, rangeHeader, type BlobSource } from "../store/source.ts";
import {
  DEFAULT_STALL_MS,
  DOCUMENT_LIMIT,
  DOCUMENT_LIMIT_TEXT,
  fetchWithin,
  followOnce,
  readBounded,
  sameOrigin,
  stallGuarded,
  statusError,
  upstream,
  type Transfer,
} from "../upstream.ts";

// A client of the Hugging Face Hub HTTP API: the file list of a model repository (with each
// LFS file's sha256, which becomes its blob digest) and downloads with Range. The base URL is
// configurable (`HF_ENDPOINT`, as the Hub's own tools do), and so is the token (`HF_TOKEN`). As
// with registries, every read has a stall timeout and the file list a size bound.

const HUB = { name: "the Hugging Face Hub", where: "on the Hugging Face Hub" };

export type HubOptions = {
  fetch: typeof fetch;
  endpoint: string;
  token?: string;
  /** How long the Hub may send nothing before the read fails. */
  stallTimeoutMs?: number;
};

export type HubFile = { path: string; size: number; digest?: string };

const TreeEntry = z.looseObject({
  type: z.string(),
  path: z.string(),
  size: z.number().int().nonnegative().optional(),
  lfs: z.looseObject({ oid: z.string().regex(/^[0-9a-f]{64}$/), size: z.number().int().nonnegative() }).optional(),
});

function headers(options: HubOptions, extra: Record<string, string> = {}): Record<string, string> {
  return { ...extra, ...(options.token ? { authorization: `Bearer ${options.token}` } : {}) };
}

const transfer = (options: HubOptions, what: string, signal: AbortSignal): Transfer => ({
  who: HUB.name,
  what,
  stallMs: options.stallTimeoutMs ?? DEFAULT_STALL_MS,
  signal,
});

/** `what` names the thing in status errors (`repository o/r`); `t.what` the answer being read. */
async function send(options: HubOptions, url: string, init: RequestInit, t: Transfer, what: string): Promise<Response> {
  const response = await upstream(t.signal, "cannot reach the Hugging Face Hub", () => fetchWithin(options.fetch, url, init, t));
  if (response.ok) return response;
  await response.body?.cancel();
  throw statusError(response.status, what, HUB);
}

function parseJson(bytes: Uint8Array): unknown {
  try {
    return JSON.parse(new TextDecoder().decode(bytes));
  } catch {
    return undefined;
  }
}

const encodePath = (path: string) => path.split("/").map(encodeURIComponent).join("/");

export async function listFiles(options: HubOptions, repository: string, signal: AbortSignal): Promise<HubFile[]> {
  const url = `${options.endpoint}/api/models/${encodePath(repository)}/tree/main?recursive=true`;
  const t = transfer(options, `the file list of ${repository}`, signal);
  const response = await send(options, url, { headers: headers(options) }, t, `repository ${repository}`);
  const bytes = await upstream(signal, `the Hugging Face Hub broke off sending the file list of ${repository}`, () =>
    readBounded(response, DOCUMENT_LIMIT, t, DOCUMENT_LIMIT_TEXT),
  );
  const parsed = z.array(TreeEntry).safeParse(parseJson(bytes));
  if (!parsed.success) throw upstreamFailure(`the Hugging Face Hub sent an unexpected file list for ${repository}`);
  return parsed.data
    .filter((entry) => entry.type === "file")
    .map((entry) => ({
      path: entry.path,
      size: entry.lfs?.size ?? entry.size ?? 0,
      ...(entry.lfs ? { digest: `sha256:${entry.lfs.oid}` } : {}),
    }));
}

export function fileSource(options: HubOptions, repository: string, file: HubFile): BlobSource {
  const url = `${options.endpoint}/${encodePath(repository)}/resolve/main/${encodePath(file.path)}`;
  const reach = (to: string, init: RequestInit, t: Transfer) =>
    upstream(t.signal, "cannot reach the Hugging Face Hub", () => fetchWithin(options.fetch, to, init, t));
  // The Hub redirects downloads to its CDN: parts go straight there, without the token (kept
  // for a redirect within the Hub's own origin, as fetch itself does).
  const open = followOnce(
    (range, t) => reach(url, { headers: headers(options, range) }, t),
    (location, range, t) => reach(location, { headers: sameOrigin(location, url) ? headers(options, range) : range }, t),
  );
  return async (range, signal) => {
    const t = transfer(options, file.path, signal);
    const response = await open(rangeHeader(range), t);
    if (!response.ok) {
      await response.body?.cancel();
      throw statusError(response.status, file.path, HUB);
    }
    if (!response.body) throw upstreamFailure(`the Hugging Face Hub sent no body for ${file.path}`);
    return { body: stallGuarded(response.body, t), ...rangeAnswer(response, range) };
  };
}
