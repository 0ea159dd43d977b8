import { badRequest } from "../http/errors.ts";

// Model references, normalised the way Docker Model Runner does: `smollm2` is
// `ai/smollm2:latest` on the default registry, `hf.co/` is `huggingface.co/`, the name is
// lower-cased and the tag keeps its case. A reference is checked before it can name anything on
// disk or in a URL: no `..`, no absolute paths, no control characters.

export const DOCKER_HUB = "docker.io";
export const HUGGING_FACE = "huggingface.co";
export const DEFAULT_NAMESPACE = "ai";
export const DEFAULT_TAG = "latest";

export type ModelReference = {
  /** Registry host with an optional port: `docker.io`, `localhost:5000`, `huggingface.co`. */
  registry: string;
  /** Lower-cased repository path, `ai/smollm2`. */
  repository: string;
  /** The repository path as written (the Hugging Face Hub keeps case in its URLs). */
  remotePath: string;
  tag: string;
  /** `sha256:<hex>` when the reference pins a manifest digest. */
  digest?: string;
  /** The name the store keeps and lists: the registry is left out when it is the default one. */
  key: string;
};

export type ReferenceOptions = { defaultRegistry?: string };

const DIGEST = /^sha256:[0-9a-f]{64}$/;
const COMPONENT = /^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*$/;
const TAG = /^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$/;
const HOST = /^(?:[a-z0-9](?:[a-z0-9-]*[a-z0-9])?(?:\.[a-z0-9](?:[a-z0-9-]*[a-z0-9])?)*|\[[0-9a-f:]+\])(?::[0-9]{1,5})?$/;
const DOCKER_HUB_ALIASES = new Set(["docker.io", "index.docker.io", "registry-1.docker.io"]);

export const isDigest = (value: string) => DIGEST.test(value);

const invalid = (input: string, why: string) =>
  badRequest("invalid_reference", `invalid model reference "${input.slice(0, 200)}": ${why}`);

/** `docker.io` and its aliases are one registry; hosts are case-insensitive. */
export function canonicalRegistry(host: string): string {
  const lower = host.toLowerCase();
  return DOCKER_HUB_ALIASES.has(lower) ? DOCKER_HUB : lower;
}

function looksLikeHost(component: string): boolean {
  return component.includes(".") || component.includes(":") || component === "localhost" || component.startsWith("[");
}

function splitDigest(input: string, text: string): [string, string | undefined] {
  const at = text.indexOf("@");
  if (at < 0) return [text, undefined];
  const digest = text.slice(at + 1);
  if (!DIGEST.test(digest)) throw invalid(input, "a digest is sha256: and 64 lower-case hex digits");
  return [text.slice(0, at), digest];
}

function splitTag(text: string): [string, string] {
  const colon = text.lastIndexOf(":");
  if (colon <= text.lastIndexOf("/")) return [text, DEFAULT_TAG];
  return [text.slice(0, colon), text.slice(colon + 1) || DEFAULT_TAG];
}

/** Splits off an explicit registry; the default namespace applies only on the default registry or Docker Hub. */
function splitRegistry(name: string, defaultRegistry: string): [string, string] {
  const slash = name.indexOf("/");
  if (slash > 0 && looksLikeHost(name.slice(0, slash))) {
    const registry = canonicalRegistry(name.slice(0, slash));
    const path = name.slice(slash + 1);
    const namespaced = path.includes("/") || (registry !== DOCKER_HUB && registry !== defaultRegistry);
    return [registry, namespaced ? path : `${DEFAULT_NAMESPACE}/${path}`];
  }
  return [defaultRegistry, name.includes("/") || defaultRegistry === HUGGING_FACE ? name : `${DEFAULT_NAMESPACE}/${name}`];
}

/** Parses and normalises a model name; throws a 400 `HttpError` for anything malformed. */
export function parseReference(input: string, options: ReferenceOptions = {}): ModelReference {
  const defaultRegistry = canonicalRegistry(options.defaultRegistry ?? DOCKER_HUB);
  const text = input.trim().replace(/^hf\.co\//i, `${HUGGING_FACE}/`);
  if (!text) throw invalid(input, "it is empty");
  if (text.length > 512) throw invalid(input, "it is too long");
  // Printable ASCII only, checked before anything is lower-cased: some letters lower-case into
  // ASCII ("\u212A", the Kelvin sign, becomes "k"), and would slip past the checks below.
  if (/[^\x21-\x7e]|\\/.test(text)) throw invalid(input, "it holds spaces, control characters, backslashes or non-ASCII characters");
  if (text.startsWith("/")) throw invalid(input, "it is an absolute path");
  const [named, digest] = splitDigest(input, text);
  const [withoutTag, tag] = digest ? [named, DEFAULT_TAG] : splitTag(named);
  const [registry, remotePath] = splitRegistry(withoutTag, defaultRegistry);
  if (!HOST.test(registry)) throw invalid(input, `"${registry}" is not a registry host`);
  const repository = remotePath.toLowerCase();
  const components = repository.split("/");
  if (components.some((c) => !COMPONENT.test(c))) {
    throw invalid(input, "each path component is lower-case letters and digits, joined by . _ or -");
  }
  if (!TAG.test(tag)) throw invalid(input, "a tag is letters, digits, _ . - (up to 128)");
  // The key leaves out the default registry, unless the name's first part would then read as a
  // registry: `docker.io/a.b/c` keeps it, or it would be the key of `a.b/c` (registry `a.b`).
  const name = registry === defaultRegistry && !looksLikeHost(components[0]!) ? repository : `${registry}/${repository}`;
  const key = digest ? `${name}@${digest}` : `${name}:${tag}`;
  // The key must parse back as itself (a default tag and registry make it longer than the input).
  if (key.length > 512) throw invalid(input, "it is too long");
  return { registry, repository, remotePath, tag, ...(digest ? { digest } : {}), key };
}

/**
 * What a lookup may match beside a name: a model id (`sha256:<hex>`) or a 12- to 64-hex prefix of
 * one. The same text may also be a valid name, so callers try the id first, then the name.
 */
export function idPrefix(input: string): string | undefined {
  const text = input.trim();
  if (DIGEST.test(text)) return text;
  if (/^[0-9a-f]{12,64}$/.test(text)) return `sha256:${text}`;
  return undefined;
}

/** The repository name without namespace and tag: `myorg/smollm2:v1` -> `smollm2`. */
export function bareName(key: string): string {
  const withoutDigest = key.split("@")[0]!;
  const [name] = splitTag(withoutDigest);
  return name.slice(name.lastIndexOf("/") + 1);
}
