import { readdir, stat } from "node:fs/promises";
import { arch } from "node:os";
import { join } from "node:path";

// Where llama-server is in an engine image, by the layouts its publishers use:
//   llama.cpp's server images (`ghcr.io/ggml-org/llama.cpp:server-b<N>`, `server-cuda-b<N>`, ...):
//     app/llama-server, its libraries beside it; ours are published the same way
//   Docker Model Runner's backend images (`docker/docker-model-backend-llamacpp:<version>-<variant>`):
//     com.docker.llama-server.native.<os>.<variant>.<arch>/bin/com.docker.llama-server, libraries in lib/
// Only the binary the layout names is ever made executable, and only with the bits its archive gave
// it; so are the libraries in its folders (which the loader maps, never runs).

export type LayoutName = "llama.cpp" | "docker-model-runner";

export type Located = {
  layout: LayoutName;
  /** Paths inside the unpacked image. */
  binary: string;
  libraryDirs: string[];
  /** `cpu`, `cuda`, `vulkan`, ... as the image says (its tag, or its folder's name). */
  variant: string;
};

const DMR_DIR = /^com\.docker\.llama-server\.native\.([a-z0-9]+)\.([a-z0-9-]+)\.([a-z0-9]+)$/;

/** Go's names of this host's architecture, as image folders and platforms say them. */
export const hostArch = () => ({ x64: "amd64", arm64: "arm64" })[arch() as "x64" | "arm64"] ?? arch();

/** The variant a llama.cpp server image's tag names: `server-cuda-b6100` is cuda, `server-b6100` cpu. */
export function variantOfTag(tag: string): string {
  const match = /^(?:full|light|server)-([a-z]+[0-9]*)-/.exec(tag);
  return match && !/^b\d+$/.test(match[1]!) ? match[1]! : "cpu";
}

const isFile = (path: string) => stat(path).then((s) => s.isFile(), () => false);

/** llama-server in an unpacked image; undefined when no layout we know holds one for this host. */
export async function locate(root: string, tag: string, gpu: boolean): Promise<Located | undefined> {
  if (await isFile(join(root, "app", "llama-server"))) return { layout: "llama.cpp", binary: "app/llama-server", libraryDirs: [], variant: variantOfTag(tag) };
  const names = await readdir(root).catch(() => [] as string[]);
  const candidates = names
    .map((name) => ({ name, match: DMR_DIR.exec(name) }))
    .filter((c) => c.match && c.match[1] === "linux" && c.match[3] === hostArch())
    // A GPU host takes a CUDA build first; any host takes a CPU one before the others.
    .sort((a, b) => rank(a.match![2]!, gpu) - rank(b.match![2]!, gpu));
  for (const { name, match } of candidates) {
    for (const file of ["com.docker.llama-server", "llama-server"]) {
      const binary = `${name}/bin/${file}`;
      if (await isFile(join(root, binary))) return { layout: "docker-model-runner", binary, libraryDirs: [`${name}/lib`], variant: match![2]! };
    }
  }
  return undefined;
}

const rank = (variant: string, gpu: boolean) => (gpu && variant.startsWith("cuda") ? 0 : variant === "cpu" ? 1 : 2);

/**
 * The image of llama.cpp's own for a version named the way Docker Model Runner's
 * `LLAMA_SERVER_VERSION` names one (`b6100`): its server image, with CUDA on a host that has a GPU.
 */
export function officialImage(version: string, gpu: boolean): string {
  return `ghcr.io/ggml-org/llama.cpp:server-${gpu ? "cuda-" : ""}${version}`;
}

/** Whether an NVIDIA GPU and its driver are there (the driver's /proc file, the device node). */
export const hasGpu = () => Promise.all(["/proc/driver/nvidia/version", "/dev/nvidia0"].map((p) => stat(p).then(() => true, () => false))).then((found) => found.some(Boolean));
