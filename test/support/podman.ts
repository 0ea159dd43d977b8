import { spawn, spawnSync } from "node:child_process";
import { readFile, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { freePort, REGISTRY_BINARY } from "./registry.ts";
import { projectRoot } from "./server-process.ts";
import { until } from "./until.ts";

// podman for the deploy tests, with the settings scripts/image-build.sh writes for this project
// (CONTAINERS_CONF): the image is built (or its cached layers reused) by that script, then run,
// composed or played here. Containers run as root, as the script's do; another user goes through sudo.

export const IMAGE = "localhost/llamadock:cpu";

const asRoot = process.getuid?.() === 0;

/** Whether `command --version` runs here. */
export const hasCommand = (command: string): boolean => spawnSync(command, ["--version"], { stdio: "ignore" }).status === 0;

/** Whether podman can be run here (installed, and root or sudo without a password). */
export function podmanUsable(): boolean {
  if (!hasCommand("podman")) return false;
  return asRoot || spawnSync("sudo", ["-n", "true"], { stdio: "ignore" }).status === 0;
}

/** In CI a tool the tests need must be there (scripts/setup.sh --test installs it): its absence fails. */
export const inCi = Boolean(process.env.CI);

export type Result = { code: number; stdout: string; stderr: string };

/** Runs a command to its end; rejects when it exits non-zero (unless `allowFailure`) or outlives `timeoutMs`. */
export function exec(command: string, args: string[], options: { env?: NodeJS.ProcessEnv; timeoutMs?: number; allowFailure?: boolean; cwd?: string } = {}): Promise<Result> {
  const [file, argv] = asRoot || !["podman", "podman-compose"].includes(command) ? [command, args] : ["sudo", ["--preserve-env=CONTAINERS_CONF", command, ...args]];
  return new Promise((resolve, reject) => {
    const child = spawn(file, argv, { cwd: options.cwd ?? projectRoot, env: options.env ?? process.env, stdio: ["ignore", "pipe", "pipe"] });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (chunk: Buffer) => (stdout += chunk.toString("utf8")));
    child.stderr.on("data", (chunk: Buffer) => (stderr += chunk.toString("utf8")));
    const timer = setTimeout(() => child.kill("SIGKILL"), options.timeoutMs ?? 120_000);
    child.once("error", reject);
    child.once("close", (code, signal) => {
      clearTimeout(timer);
      const result = { code: code ?? 128, stdout, stderr };
      if ((code === 0 || options.allowFailure) && !signal) resolve(result);
      else reject(new Error(`${command} ${args.join(" ")} ended with ${signal ?? code}:\n${stderr.slice(-4000)}${stdout.slice(-2000)}`));
    });
  });
}

export type Podman = {
  /** The podman settings file the build script wrote. */
  conf: string;
  env: NodeJS.ProcessEnv;
  /** `podman ARGS`, with those settings. */
  run(args: string[], options?: { timeoutMs?: number; allowFailure?: boolean }): Promise<Result>;
  /** How long the build took, and what it printed. */
  build: { seconds: number; log: string };
};

/**
 * `npm run image:build`'s script: installs podman and what the build needs when missing, makes the
 * base image once, builds IMAGE (each layer from the cache when its inputs did not change). Once
 * per run: the files of a run that need the image take the first one's build, noted in the run's
 * own TMPDIR (test/support/temp-guard.ts), where a second build would only find every layer cached.
 */
export async function buildImage(timeoutMs: number): Promise<Podman> {
  const started = Date.now();
  const noted = join(tmpdir(), "image-build.conf");
  let conf = await readFile(noted, "utf8").catch(() => "");
  let log = "built earlier in this run";
  if (!conf) {
    const built = await exec("bash", ["scripts/image-build.sh"], { timeoutMs });
    conf = built.stdout.trim().split("\n").at(-1)!;
    log = built.stderr;
    await writeFile(noted, conf);
  }
  const env = { ...process.env, CONTAINERS_CONF: conf };
  return {
    conf,
    env,
    run: (args, options = {}) => exec("podman", args, { ...options, env }),
    build: { seconds: Math.round((Date.now() - started) / 1000), log },
  };
}

/** The gateway address of podman's default bridge network: the host, as its containers reach it. */
export async function bridgeGateway(podman: Podman): Promise<string> {
  const { stdout } = await podman.run(["network", "inspect", "podman", "--format", "{{range .Subnets}}{{.Gateway}}{{end}}"]);
  return stdout.trim();
}

/** The Debian base image scripts/image-build.sh makes with mmdebstrap. */
export const BASE_IMAGE = "localhost/llamadock-base:bookworm";

export type RegistryContainer = { url: string; address: string; stop(): Promise<void> };

/**
 * Debian's docker-registry from this host, run in a container on `network` (the binary and its
 * settings mounted read-only into the base image): containers on that network reach it at
 * `address` (its name `alias` where the network has DNS, else its own address), this host at `url`
 * on loopback.
 */
export async function startRegistryContainer(podman: Podman, name: string, network: string, dir: string, alias?: string): Promise<RegistryContainer> {
  const port = await freePort();
  const config = ["version: 0.1", "log:", "  level: error", "  accesslog:", "    disabled: true", "storage:", "  filesystem:", "    rootdirectory: /tmp/registry", "http:", "  addr: :5000", "  secret: test-only-secret"];
  await writeFile(join(dir, "registry.yml"), `${config.join("\n")}\n`);
  await podman.run(["rm", "--force", "--time", "0", name], { allowFailure: true });
  await podman.run([
    "run", "--detach", "--name", name, "--network", network, ...(alias ? ["--network-alias", alias] : []),
    "--publish", `127.0.0.1:${port}:5000`,
    "--volume", `${REGISTRY_BINARY}:/usr/local/bin/docker-registry:ro`,
    "--volume", `${join(dir, "registry.yml")}:/etc/registry.yml:ro`,
    BASE_IMAGE, "docker-registry", "serve", "/etc/registry.yml",
  ]);
  const url = `http://127.0.0.1:${port}`;
  await until(() => fetch(`${url}/v2/`).then((r) => r.ok, () => false), "the registry container");
  const { stdout } = await podman.run(["inspect", "--format", "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}", name]);
  return {
    url,
    address: `${alias ?? stdout.trim()}:5000`,
    stop: async () => void (await podman.run(["rm", "--force", "--time", "0", name], { allowFailure: true })),
  };
}
