import * as z from "zod";
import { unsupportedArtifact, upstreamFailure } from "../errors.ts";
import { DOCKER_HUB, type ModelReference } from "../reference.ts";
import { resumedAt, type BlobSource } from "../store/blobs.ts";
import { digestOf } from "../store/manifests.ts";
import { authorize, parseChallenge, type Credentials } from "./auth.ts";
import { statusError, upstream } from "../upstream.ts";

// A client of the OCI distribution API over fetch, for pulling Docker model artifacts: the
// manifest, the config, and the layers as streams (with Range to resume). Registry answers become
// our errors here (401, 404, 422, 500), never in the handlers.

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

export type Repository = {
  manifest(signal: AbortSignal): Promise<Manifest>;
  blob(descriptor: Descriptor, signal: AbortSignal): Promise<Uint8Array>;
  blobSource(descriptor: Descriptor): BlobSource;
};

const REGISTRY = { name: "the registry", where: "in the registry" };

function checkStatus(response: Response, what: string): void {
  if (!response.ok) throw statusError(response.status, what, REGISTRY);
}

export function openRepository(reference: ModelReference, options: RegistryOptions, bearerToken?: string): Repository {
  const base = `${registryBaseUrl(reference.registry, options.insecureHosts)}/v2/${reference.repository}`;
  const credentials = options.credentials[reference.registry];
  let authorization = bearerToken ? `Bearer ${bearerToken}` : undefined;

  async function send(path: string, headers: Record<string, string>, signal: AbortSignal): Promise<Response> {
    const attempt = () =>
      upstream(signal, `cannot reach the registry ${reference.registry}`, () =>
        options.fetch(`${base}${path}`, { headers: { ...headers, ...(authorization ? { authorization } : {}) }, signal }),
      );
    const response = await attempt();
    const challenge = response.status === 401 ? parseChallenge(response.headers.get("www-authenticate") ?? "") : undefined;
    if (!challenge) return response;
    await response.body?.cancel();
    const scope = `repository:${reference.repository}:pull`;
    authorization = await authorize({ challenge, scope, credentials, bearerToken, fetch: options.fetch, signal });
    return attempt();
  }

  /** The whole body of an answer whose status was checked; a connection cut meanwhile is upstream's failure. */
  const bytesOf = (response: Response, what: string, signal: AbortSignal) =>
    upstream(signal, `the registry ${reference.registry} broke off sending ${what}`, async () => new Uint8Array(await response.arrayBuffer()));

  return {
    async manifest(signal) {
      const target = reference.digest ?? reference.tag;
      const response = await send(`/manifests/${target}`, { accept: MediaTypes.manifest }, signal);
      checkStatus(response, `model ${reference.key}`);
      const bytes = await bytesOf(response, `the manifest of ${reference.key}`, signal);
      const digest = digestOf(bytes);
      if (reference.digest && digest !== reference.digest) throw upstreamFailure(`the manifest does not match ${reference.digest}`);
      const mediaType = response.headers.get("content-type")?.split(";")[0];
      let body: unknown;
      try {
        body = JSON.parse(new TextDecoder().decode(bytes));
      } catch {
        throw unsupportedArtifact("the registry's manifest is not JSON");
      }
      const parsed = ManifestBody.safeParse(body);
      if (!parsed.success || (parsed.data.mediaType ?? mediaType) !== MediaTypes.manifest) {
        throw unsupportedArtifact(`${reference.key} is not a model artifact (manifest ${parsed.data?.mediaType ?? mediaType})`);
      }
      return { bytes, digest, config: parsed.data.config, layers: parsed.data.layers };
    },
    async blob(descriptor, signal) {
      const response = await send(`/blobs/${descriptor.digest}`, {}, signal);
      checkStatus(response, `blob ${descriptor.digest}`);
      const bytes = await bytesOf(response, `blob ${descriptor.digest}`, signal);
      if (digestOf(bytes) !== descriptor.digest) throw upstreamFailure(`blob ${descriptor.digest} does not match its digest`);
      return bytes;
    },
    blobSource(descriptor) {
      return async (offset, signal) => {
        const range: Record<string, string> = offset > 0 ? { range: `bytes=${offset}-` } : {};
        const response = await send(`/blobs/${descriptor.digest}`, range, signal);
        checkStatus(response, `blob ${descriptor.digest}`);
        if (!response.body) throw upstreamFailure(`the registry sent no body for ${descriptor.digest}`);
        return { body: response.body, start: resumedAt(response, offset) };
      };
    },
  };
}
