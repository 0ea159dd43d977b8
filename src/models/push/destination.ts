import type { HttpError } from "../../http/errors.ts";
import { forbidden, notInRegistry, unauthorized, upstreamFailure } from "../errors.ts";
import type { ModelReference } from "../reference.ts";
import { authorize, parseChallenge } from "../registry/auth.ts";
import { MediaTypes, registryBaseUrl, type RegistryOptions } from "../registry/client.ts";
import { DEFAULT_STALL_MS, fetchWithin, formatDuration, readBounded, sameOrigin, upstream, type Transfer } from "../upstream.ts";

// The registry a model is pushed to, through the OCI distribution API: a blob the registry has
// already is skipped (HEAD); one it lacks is uploaded whole (POST opens an upload, PUT with
// `?digest=` sends the bytes and closes it); the manifest goes last (PUT by tag), so the tag
// never names an artifact with missing blobs. Credentials are those pulls use, asked for with
// push scope. The registry's refusals become our errors here: 401 and 403 kept apart (no
// credentials, or credentials that may not push), 404 an unknown repository.

/** Opens a blob's bytes again for each attempt; `read` is told of every chunk handed to the upload. */
export type BlobBody = (read: (bytes: number) => void) => ReadableStream<Uint8Array>;

export type Destination = {
  /** Opens an upload session, which proves (or refuses, before any progress) our right to push. */
  start(signal: AbortSignal): Promise<void>;
  hasBlob(digest: string, signal: AbortSignal): Promise<boolean>;
  putBlob(blob: { digest: string; size: number }, body: BlobBody, signal: AbortSignal): Promise<void>;
  putManifest(bytes: Uint8Array, signal: AbortSignal): Promise<void>;
  /** Cancels the session `start` opened if no blob used it. */
  close(): Promise<void>;
};

/** What a refusal's body may weigh: enough for the registry's `{"errors":[…]}`. */
const ERROR_BODY_LIMIT = 64 * 1024;

type Send = { method: string; url: string; headers?: Record<string, string>; body?: () => BodyInit; upload?: boolean };

/** The registry's own account of a refusal (`DENIED: requested access to the resource is denied`), if it gave one. */
async function registryDetail(response: Response, t: Transfer): Promise<string> {
  const bytes = await readBounded(response, ERROR_BODY_LIMIT, t, "64 KiB").catch(() => undefined);
  try {
    const body = JSON.parse(new TextDecoder().decode(bytes)) as { errors?: { code?: string; message?: string }[] };
    return (body.errors ?? []).map((e) => [e.code, e.message].filter(Boolean).join(": ")).join("; ");
  } catch {
    return "";
  }
}

export function openDestination(reference: ModelReference, options: RegistryOptions, bearerToken?: string): Destination {
  const base = `${registryBaseUrl(reference.registry, options.insecureHosts)}/v2/${reference.repository}`;
  const credentials = options.credentials[reference.registry];
  const stallMs = options.stallTimeoutMs ?? DEFAULT_STALL_MS;
  const who = `the registry ${reference.registry}`;
  let authorization = bearerToken ? `Bearer ${bearerToken}` : undefined;
  let spare: string | undefined;

  const transfer = (what: string, signal: AbortSignal): Transfer => ({ who, what, stallMs, signal });

  async function refusal(response: Response, t: Transfer): Promise<HttpError> {
    const detail = await registryDetail(response, t);
    const said = `${response.status}${detail ? `, ${detail}` : ""}`;
    const target = `${reference.registry}/${reference.repository}`;
    if (response.status === 401) return unauthorized(`${who} refused to let us push to ${target} (${said}): give credentials in REGISTRY_CREDENTIALS or a bearer-token`);
    if (response.status === 403) return forbidden(`${who} denied pushing to ${target} (${said}): the credentials given may not push there`);
    if (response.status === 404) return notInRegistry(`${who} has no repository ${reference.repository} to push to (${said})`);
    return upstreamFailure(`${who} answered ${said} to ${t.what}`);
  }

  async function send(request: Send, t: Transfer): Promise<Response> {
    const attempt = () => {
      const headers = { ...request.headers, ...(authorization && sameOrigin(request.url, base) ? { authorization } : {}) };
      const init = { method: request.method, headers, ...(request.body ? { body: request.body(), duplex: "half" } : {}) } as RequestInit;
      // An upload's answer comes only after its last byte: its own guard times it (see putBlob).
      const go = () => (request.upload ? options.fetch(request.url, { ...init, signal: t.signal }) : fetchWithin(options.fetch, request.url, init, t));
      return upstream(t.signal, `cannot reach ${who}`, go);
    };
    const response = await attempt();
    const challenge = response.status === 401 ? parseChallenge(response.headers.get("www-authenticate") ?? "") : undefined;
    if (!challenge) return response;
    await response.body?.cancel().catch(() => {});
    const scope = `repository:${reference.repository}:pull,push`;
    authorization = await authorize({ challenge, scope, credentials, bearerToken, fetch: options.fetch, signal: t.signal, stallTimeoutMs: stallMs });
    return attempt();
  }

  async function openUpload(signal: AbortSignal): Promise<string> {
    const t = transfer("the opening of an upload", signal);
    const response = await send({ method: "POST", url: `${base}/blobs/uploads/` }, t);
    if (response.status !== 202) throw await refusal(response, t);
    await response.body?.cancel().catch(() => {});
    const location = response.headers.get("location");
    if (!location) throw upstreamFailure(`${who} opened an upload without saying where (no Location)`);
    return new URL(location, base).href;
  }

  return {
    async start(signal) {
      spare ??= await openUpload(signal);
    },
    async hasBlob(digest, signal) {
      const t = transfer(`a check of blob ${digest}`, signal);
      const response = await send({ method: "HEAD", url: `${base}/blobs/${digest}` }, t);
      await response.body?.cancel().catch(() => {});
      if (response.ok) return true;
      if (response.status === 404) return false;
      throw await refusal(response, t);
    },
    async putBlob(blob, body, signal) {
      const location = spare ?? (await openUpload(signal));
      spare = undefined;
      const url = new URL(location);
      url.searchParams.set("digest", blob.digest);
      // Fails once the upload has taken nothing for `stallMs`, or the answer has not come that
      // long after the last byte (the registry checks the digest first).
      const silence = new AbortController();
      let timer: ReturnType<typeof setTimeout> | undefined;
      const what = `the upload of blob ${blob.digest}`;
      const arm = () => {
        clearTimeout(timer);
        timer = setTimeout(() => silence.abort(upstreamFailure(`${who} took nothing of ${what} for ${formatDuration(stallMs)}`)), stallMs);
      };
      const t = transfer(what, AbortSignal.any([signal, silence.signal]));
      arm();
      try {
        const headers = { "content-type": "application/octet-stream", "content-length": String(blob.size) };
        const response = await send({ method: "PUT", url: url.href, headers, body: () => body(arm), upload: true }, t);
        if (response.status !== 201) throw await refusal(response, t);
        await response.body?.cancel().catch(() => {});
      } catch (error) {
        if (silence.signal.aborted && !signal.aborted) throw silence.signal.reason;
        throw error;
      } finally {
        clearTimeout(timer);
      }
    },
    async putManifest(bytes, signal) {
      const t = transfer(`the manifest of ${reference.key}`, signal);
      const headers = { "content-type": MediaTypes.manifest };
      const response = await send({ method: "PUT", url: `${base}/manifests/${reference.tag}`, headers, body: () => bytes as Uint8Array<ArrayBuffer> }, t);
      if (response.status !== 201 && response.status !== 200) throw await refusal(response, t);
      await response.body?.cancel().catch(() => {});
    },
    async close() {
      if (!spare) return;
      const location = spare;
      spare = undefined;
      const t = transfer("the cancelling of an unused upload", AbortSignal.timeout(stallMs));
      await send({ method: "DELETE", url: location }, t).then((r) => r.body?.cancel(), () => {});
    },
  };
}
