import { execFileSync } from "node:child_process";
import { chmod, mkdtemp, readFile, rename, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { env } from "node:process";
import { resolveLlamaServerBinary } from "../../sidecar/index.ts";
import { detectRuntime } from "../../src/runtime/index.ts";
import { publishEngine, type PublishLayout, type Published } from "../../src/engines/publish.ts";
import { tarEnd, tarHeader, tarPadding } from "../../src/models/package/tar.ts";
import { pushBlob, type Registry } from "./registry.ts";

// llama.cpp builds for engine tests, made of the one the setup builds: that build itself, and the
// same binary behind a thin shell wrapper that plays another release. `renamed`: its --help spells
// `-cms` the older way (`-cpent, --checkpoint-every-n-tokens`), lists no `--swa-full`, and it
// reports another version; it turns `-cpent` back into `-cms` for the real binary. `broken`: it
// answers --help and --version as the real one, then fails to serve.

export type BuildKind = "as-built" | "renamed" | "broken";

/** The setup's build folder: llama-server and its libraries. */
export async function builtFolder(): Promise<string> {
  const binary = await resolveLlamaServerBinary({ runtime: await detectRuntime(), env });
  return dirname(binary.path);
}

const WRAPPERS: Record<Exclude<BuildKind, "as-built">, string> = {
  renamed: `#!/bin/sh
here="$(dirname "$0")"
case "$1" in
  --help) "$here/llama-server-real" --help | sed -e 's/^-cms,  --checkpoint-min-step N/-cpent, --checkpoint-every-n-tokens N/' -e '/^--swa-full/d'; exit $? ;;
  --version) "$here/llama-server-real" --version 2>&1 | sed -e 's/version: /version: 0.4.9-renamed /'; exit 0 ;;
esac
for arg do
  shift
  if [ "$arg" = "-cpent" ]; then set -- "$@" -cms; else set -- "$@" "$arg"; fi
done
exec "$here/llama-server-real" "$@"
`,
  broken: `#!/bin/sh
here="$(dirname "$0")"
case "$1" in
  --help|--version) exec "$here/llama-server-real" "$@" ;;
esac
echo "this build cannot load models" >&2
exit 3
`,
};

/** Makes a build of `kind` from the setup's build in `folder` (a new one). */
async function makeBuild(kind: BuildKind, folder: string): Promise<void> {
  // -a: the libraries' links stay links, as they are in the image.
  execFileSync("cp", ["-a", await builtFolder(), folder]);
  if (kind === "as-built") return;
  await rename(join(folder, "llama-server"), join(folder, "llama-server-real"));
  await writeFile(join(folder, "llama-server"), WRAPPERS[kind]);
  await chmod(join(folder, "llama-server"), 0o755);
}

/** Pushes the build of `kind` (changed by `alter`) to the registry as `llamadock/llama-server:<tag>`. */
export async function publishBuild(registry: Registry, kind: BuildKind, tag: string, alter?: (folder: string) => Promise<void>, layout?: PublishLayout): Promise<Published> {
  // The build is made in a temporary folder, pushed and removed: a copy of llama.cpp's libraries each.
  const scratch = await mkdtemp(join(tmpdir(), `llamadock-engine-${kind}-`));
  try {
    const folder = join(scratch, "bin");
    await makeBuild(kind, folder);
    await alter?.(folder);
    return await publishEngine(folder, `${registry.host}/llamadock/llama-server:${tag}`, { fetch: globalThis.fetch.bind(globalThis), insecureHosts: [], credentials: {} }, layout);
  } finally {
    await rm(scratch, { recursive: true, force: true });
  }
}

/** A library of the build made to need a glibc no host has yet (its version needs say GLIBC_2.99). */
export async function needingNewGlibc(folder: string): Promise<void> {
  const library = join(folder, execFileSync("sh", ["-c", `cd "${folder}" && ls libggml-base.so.*.*`], { encoding: "utf8" }).trim().split("\n")[0]!);
  const bytes = await readFile(library);
  const text = bytes.toString("latin1");
  const found = /GLIBC_2\.\d\d\0/.exec(text);
  if (!found) throw new Error(`no two-digit GLIBC_2.x version need in ${library}`);
  bytes.write("GLIBC_2.99", found.index, "latin1");
  await writeFile(library, bytes);
}

/** Replaces what the registry serves for a blob with as many other bytes (the registry does not check them again). */
export async function tamperBlob(registry: Registry, digest: string): Promise<void> {
  const hex = digest.slice("sha256:".length);
  const data = join(registry.storage, "docker", "registry", "v2", "blobs", "sha256", hex.slice(0, 2), hex, "data");
  const bytes = await readFile(data);
  bytes[bytes.length >> 1] = bytes[bytes.length >> 1]! ^ 0xff;
  await writeFile(data, bytes);
}

/** An entry of a hand-made layer: a file (`data`), a folder, a symbolic link (`link`) or a hard link (`hard`). */
export type LayerEntry = { name: string; data?: string; link?: string; hard?: string; dir?: boolean; mode?: number };

/** A plain tar layer of `entries`, written as they are (hostile names too). */
export function layerTar(entries: LayerEntry[]): Uint8Array {
  const parts: Uint8Array[] = [];
  for (const e of entries) {
    if (e.link !== undefined) parts.push(tarHeader(e.name, 0, 0, { type: "2", link: e.link }));
    else if (e.hard !== undefined) parts.push(tarHeader(e.name, 0, 0, { type: "1", link: e.hard }));
    else if (e.dir) parts.push(tarHeader(e.name, 0, 0, { type: "5", mode: 0o755 }));
    else {
      const bytes = new TextEncoder().encode(e.data ?? "");
      parts.push(tarHeader(e.name, bytes.byteLength, 0, { mode: e.mode ?? 0o644 }), bytes, tarPadding(bytes.byteLength));
    }
  }
  parts.push(tarEnd());
  const out = new Uint8Array(parts.reduce((n, p) => n + p.byteLength, 0));
  parts.reduce((at, p) => (out.set(p, at), at + p.byteLength), 0);
  return out;
}

const OCI = { config: "application/vnd.oci.image.config.v1+json", layer: "application/vnd.oci.image.layer.v1.tar", manifest: "application/vnd.oci.image.manifest.v1+json" };

/**
 * Pushes an image of plain tar `layers` (each either bytes, or a blob the repository already holds,
 * such as a published build's layer) to `repository:tag`; answers its reference.
 */
export async function pushImage(registry: Registry, repository: string, tag: string, layers: (Uint8Array | { digest: string; size: number; mediaType: string })[]): Promise<string> {
  const descriptors = [];
  for (const layer of layers) {
    if (!(layer instanceof Uint8Array)) descriptors.push(layer);
    else descriptors.push({ mediaType: OCI.layer, ...(await pushBlob(registry.url, repository, layer)) });
  }
  const config = new TextEncoder().encode(JSON.stringify({ architecture: "amd64", os: "linux", rootfs: { type: "layers", diff_ids: [] } }));
  const manifest = JSON.stringify({ schemaVersion: 2, mediaType: OCI.manifest, config: { mediaType: OCI.config, ...(await pushBlob(registry.url, repository, config)) }, layers: descriptors });
  const put = await fetch(`${registry.url}/v2/${repository}/manifests/${tag}`, { method: "PUT", headers: { "content-type": OCI.manifest }, body: manifest });
  if (put.status !== 201) throw new Error(`manifest PUT answered ${put.status}: ${await put.text()}`);
  return `${registry.host}/${repository}:${tag}`;
}
