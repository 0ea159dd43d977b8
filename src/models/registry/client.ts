import * as z from "zod";
import { unsupportedArtifact, upstreamFailure } from "../errors.ts";
import { DOCKER_HUB, type ModelReference } from "../reference.ts";
import { rangeAnswer, rangeHeader, type BlobSource } from "../store/source.ts";
import { digestOf } from "../store/manifests.ts";
import { authorize, parseChallenge, type Credentials } from "./auth.ts";
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

// A client of the OCI distribution API over fetch, for pulling Docker model artifacts: the
// manifest, the config, and the layers as streams (with Range to resume). Registry answers become
// our errors here (401, 404, 422, 500), never in the handlers. Every read has a stall timeout, and
// what is read whole (manifest, config) a size bound.

export const MediaTypes = {
  manifest: "application/vnd.oci.image.manifest.v1+json",
  configs: ["application/vnd.docker.ai.model.config.v0.1+json", "application/vnd.docker.ai.model.config.v0.2+json"],
  gguf: "application/vnd.docker.ai.gguf.v3",
  mmproj: "application/vnd.docker.ai.mmproj",
  chatTemplate: "application/vnd.docker.ai.chat.template.jinja",
  license: "application/vnd.docker.ai.license",
} as const;

export type RegistryOptions = {
  fetch: typeof fetch;
  /** Hosts (with port, if any) reached over plain HTTP besides loopback and `.local` ones. */
  insecureHosts: string[];
  credentials: Record<string, Credentials>;
  /** How long the registry (or its token service) may send nothing before the read fails. */
  stallTimeoutMs?: number;
};

const Descriptor = z.object({
  mediaType: z.string(),
  digest: z.string().regex(/^sha256:[0-9a-f]{64}$/),
  size: z.number().int().nonnegative(),
});
export type Descriptor = z.infer<typeof Descriptor>;

const ManifestBody = z.object({ mediaType: z.string().optional(), config: Descriptor, layers: z.array(Descriptor) });

export type Manifest = { bytes: Uint8Array; digest: string; config: Descriptor; layers: Descriptor[] };

function isPlainHttp(host: string, insecureHosts: string[]): boolean {
  const name = host.replace(/:\d+$/, "");
  return ["localhost", "127.0.0.1", "[::1]"].includes(name) || name.endsWith(".local") || insecureHosts.includes(host);
}

export function registryBaseUrl(host: string, insecureHosts: string[]): string {
  if (host === DOCKER_HUB) return "https://registry-1.docker.io";
  return `${isPlainHttp(host, insecureHosts) ? "http" : "https"}://${host}`;
}

/**
 * An image of one platform, for the engine images (src/engines): an image index (or Docker's
 * manifest list) is then followed to that platform's manifest, and Docker's own image manifest is
 * taken beside OCI's. Without it, only a model artifact's OCI manifest is.
 */
export type ImagePlatform = { os: string; architecture: string };

const IMAGE_TYPES = {
  indexes: ["application/vnd.oci.image.index.v1+json", "application/vnd.docker.distribution.manifest.list.v2+json"],
  manifests: [MediaTypes.manifest, "application/vnd.docker.distribution.manifest.v2+json"],
};

const IndexBody = z.object({
  manifests: z.array(Descriptor.extend({ platform: z.object({ os: z.string(), architecture: z.string() }).optional() })),
});

export type Repository = {
  manifest(signal: AbortSignal, platform?: ImagePlatform): Promise<Manifest>;
  blob(descriptor: Descriptor, signal: AbortSignal): Promise<Uint8Array>;
  blobSource(descriptor: Descriptor): BlobSource;
};

const REGISTRY = { name: "the registry", where: "in the registry" };

async function checkStatus(response: Response, what: string): Promise<void> {
  if (response.ok) return;
  // An error answer is not read: its body might never end.
  await response.body?.cancel().catch(() => {});
  throw statusError(response.status, what, REGISTRY);
}

/** A document we read whole (a config) whose descriptor says it is larger than we read is refused unread. */
export function checkDocumentSize(descriptor: Descriptor, what: string): void {
  if (descriptor.size > DOCUMENT_LIMIT) {
    throw upstreamFailure(`${what} is ${descriptor.size} bytes, more than the ${DOCUMENT_LIMIT_TEXT} it may have: refused`);
  }
}

export function openRepository(reference: ModelReference, options: RegistryOptions, bearerToken?: string): Repository {
  const base = `${registryBaseUrl(reference.registry, options.insecureHosts)}/v2/${reference.repository}`;
  const credentials = options.credentials[reference.registry];
  let authorization = bearerToken ? `Bearer ${bearerToken}` : undefined;
  const stallTimeoutMs = options.stallTimeoutMs ?? DEFAULT_STALL_MS;
  const who = `the registry ${reference.registry}`;
  const transfer = (what: string, signal: AbortSignal): Transfer => ({ who, what, stallMs: stallTimeoutMs, signal });

  async function send(path: string, headers: Record<string, string>, t: Transfer): Promise<Response> {
    const { signal } = t;
    const attempt = () =>
      upstream(signal, `cannot reach the registry ${reference.registry}`, () =>
        fetchWithin(options.fetch, `${base}${path}`, { headers: { ...headers, ...(authorization ? { authorization } : {}) } }, t),
      );
    const response = await attempt();
    const challenge = response.status === 401 ? parseChallenge(response.headers.get("www-authenticate") ?? "") : undefined;
    if (!challenge) return response;
    await response.body?.cancel();
    const scope = `repository:${reference.repository}:pull`;
    authorization = await authorize({ challenge, scope, credentials, bearerToken, fetch: options.fetch, signal, stallTimeoutMs });
    return attempt();
  }

  /** The whole body of an answer whose status was checked, at most `limit` bytes; a connection cut meanwhile is upstream's failure. */
  const bytesOf = (response: Response, t: Transfer, limit: number, limitText: string) =>
    upstream(t.signal, `${who} broke off sending ${t.what}`, () => readBounded(response, limit, t, limitText));

  /**
   * The manifest at `target`: a model artifact's OCI manifest; with `platform`, an image's (OCI's or
   * Docker's), an index followed once to the platform's entry (`viaIndex`: this is that entry).
   */
  async function readManifest(signal: AbortSignal, target: string, platform: ImagePlatform | undefined, viaIndex: boolean): Promise<Manifest> {
    const image = platform !== undefined || viaIndex;
    const t = transfer(`the manifest of ${reference.key}`, signal);
    const accept = image ? [...IMAGE_TYPES.manifests, ...(viaIndex ? [] : IMAGE_TYPES.indexes)].join(", ") : MediaTypes.manifest;
    const response = await send(`/manifests/${target}`, { accept }, t);
    await checkStatus(response, `${image ? "image" : "model"} ${reference.key}`);
    const bytes = await bytesOf(response, t, DOCUMENT_LIMIT, DOCUMENT_LIMIT_TEXT);
    const digest = digestOf(bytes);
    if (target.startsWith("sha256:") && digest !== target) throw upstreamFailure(`the manifest does not match ${target}`);
    const mediaType = response.headers.get("content-type")?.split(";")[0];
    let body: unknown;
    try {
      body = JSON.parse(new TextDecoder().decode(bytes));
    } catch {
      throw unsupportedArtifact("the registry's manifest is not JSON");
    }
    const kind = (body as { mediaType?: string } | null)?.mediaType ?? mediaType ?? "";
    if (platform && !viaIndex && IMAGE_TYPES.indexes.includes(kind)) {
      const entries = IndexBody.safeParse(body).data?.manifests ?? [];
      const chosen = entries.find((m) => m.platform?.os === platform.os && m.platform.architecture === platform.architecture);
      if (!chosen) throw unsupportedArtifact(`${reference.key} has no image for ${platform.os}/${platform.architecture}`);
      return readManifest(signal, chosen.digest, undefined, true);
    }
    const parsed = ManifestBody.safeParse(body);
    const taken: string[] = image ? IMAGE_TYPES.manifests : [MediaTypes.manifest];
    if (!parsed.success || !taken.includes(parsed.data.mediaType ?? mediaType ?? "")) {
      throw unsupportedArtifact(`${reference.key} is not a ${image ? "container image" : "model artifact"} (manifest ${parsed.data?.mediaType ?? mediaType})`);
    }
    return { bytes, digest, config: parsed.data.config, layers: parsed.data.layers };
  }

  return {
    async manifest(signal, platform) {
      return readManifest(signal, reference.digest ?? reference.tag, platform, false);
    },
    async blob(descriptor, signal) {
      const t = transfer(`blob ${descriptor.digest}`, signal);
      checkDocumentSize(descriptor, t.what);
      const response = await send(`/blobs/${descriptor.digest}`, {}, t);
      await checkStatus(response, t.what);
      // Never more than the descriptor says: a longer body is cut off and refused.
      const bytes = await bytesOf(response, t, descriptor.size, `its ${descriptor.size} bytes`);
      if (digestOf(bytes) !== descriptor.digest) throw upstreamFailure(`blob ${descriptor.digest} does not match its digest`);
      return bytes;
    },
    blobSource(descriptor) {
      // Straight to where the registry redirected (a CDN): the registry's credentials go there only
      // within its own origin, as fetch itself does.
      const direct = (url: string, headers: Record<string, string>, t: Transfer) => {
        const own: Record<string, string> = authorization && sameOrigin(url, base) ? { authorization } : {};
        return upstream(t.signal, `cannot reach ${new URL(url).host}`, () => fetchWithin(options.fetch, url, { headers: { ...headers, ...own } }, t));
      };
      const open = followOnce((headers, t) => send(`/blobs/${descriptor.digest}`, headers, t), direct);
      return async (range, signal) => {
        const t = transfer(`blob ${descriptor.digest}`, signal);
        const response = await open(rangeHeader(range), t);
        await checkStatus(response, t.what);
        if (!response.body) throw upstreamFailure(`the registry sent no body for ${descriptor.digest}`);
        // The store bounds the length (the descriptor's size or the range); the guard bounds the silence.
        return { body: stallGuarded(response.body, t), ...rangeAnswer(response, range) };
      };
    },
  };
}
