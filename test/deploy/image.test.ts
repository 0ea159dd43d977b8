import { existsSync, readFileSync } from "node:fs";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ask } from "../support/http.ts";
import { bridgeGateway, buildImage, IMAGE, inCi, podmanUsable, type Podman } from "../support/podman.ts";
import { freePort, pushModel, startRegistry, type Registry } from "../support/registry.ts";
import { tinyLlamaGguf } from "../support/tiny-gguf.ts";
import { until } from "../support/until.ts";

// The image as a user runs it: built by `npm run image:build`'s script with podman (layers from the
// cache when nothing they depend on changed), started read-only as its own user with a models volume,
// and asked through its published port. Models come from a registry on this host, which the
// container reaches at its bridge's gateway.

const usable = podmanUsable();
if (!usable && !inCi) console.warn("podman cannot run here: the image is NOT built or run (scripts/setup.sh --test installs podman; in CI this fails)");

// A cold build compiles llama.cpp in the image: about 10 minutes on 2 free cores; far longer on a
// busy machine. A cached one takes seconds.
const BUILD_TIMEOUT_MS = 60 * 60_000;
const KEY = "image-test-key";
const AUTH = { authorization: `Bearer ${KEY}` };
const GRACE_S = 30;

describe.skipIf(!usable && !inCi)("the image, built and run with podman", () => {
  const name = `llamadock-image-test-${process.pid}`;
  const volume = `${name}-models`;
  let podman: Podman;
  let registry: Registry;
  let registryHost: string;
  let url: string;
  const target = () => ({ url });
  const model = (repository: string) => `${registryHost}/${repository}:latest`;

  /** Starts the stopped container again and waits until /livez answers through the published port. */
  async function started(): Promise<void> {
    const { stdout } = await podman.run(["port", name, "12434/tcp"]);
    url = `http://${stdout.trim().split("\n")[0]}`;
    await until(async () => (await ask(target(), "GET", "/livez").catch(() => undefined))?.status === 200, "/livez through the published port");
  }

  beforeAll(async () => {
    podman = await buildImage(BUILD_TIMEOUT_MS);
    console.log(`image build (scripts/image-build.sh): ${podman.build.seconds} s`);
    const gateway = await bridgeGateway(podman);
    const port = await freePort();
    registryHost = `${gateway}:${port}`;
    await podman.run(["volume", "create", volume]);
    await podman.run([
      "run", "--detach", "--name", name,
      "--read-only", "--tmpfs", "/tmp",
      "--volume", `${volume}:/models`,
      "--publish", "127.0.0.1::12434",
      "--env", `API_KEYS=${KEY}`,
      "--env", `REGISTRY_INSECURE=${registryHost}`,
      "--env", "SHUTDOWN_GRACE_MS=20000",
      IMAGE,
    ]);
    await started();
    // The bridge exists once a container is on it: the registry listens on its gateway from now on.
    registry = await startRegistry(gateway, port);
    await pushModel(registry, "test/tiny", "latest", tinyLlamaGguf({ seed: 7 }));
    await pushModel(registry, "test/embed", "latest", tinyLlamaGguf({ seed: 8, meanPooling: true }));
  }, BUILD_TIMEOUT_MS + 180_000);

  afterAll(async () => {
    if (podman) {
      await podman.run(["rm", "--force", "--time", "0", name], { allowFailure: true });
      await podman.run(["volume", "rm", "--force", volume], { allowFailure: true });
    }
    await registry?.stop();
  });

  it("is small: llama-server, its libraries, Bun, the production dependencies and the code", async () => {
    const { stdout } = await podman.run(["image", "inspect", "--format", "{{.Size}}", IMAGE]);
    console.log(`image size: ${(Number(stdout) / 1e6).toFixed(1)} MB`);
    expect(Number(stdout)).toBeLessThanOrEqual(350e6);
  });

  it("runs as uid 10001 on a read-only root file system, writing only to the models volume and /tmp", async () => {
    const { stdout } = await podman.run(["inspect", "--format", "{{.State.Pid}} {{.HostConfig.ReadonlyRootfs}} {{.Config.User}}", name]);
    const [pid, readOnly, user] = stdout.trim().split(" ");
    expect([readOnly, user]).toEqual(["true", "10001:10001"]);
    // The server's own process, as the host sees it (no user namespace: the same ids).
    expect(readFileSync(`/proc/${pid}/status`, "utf8")).toMatch(/^Uid:\s+10001\s+10001\s+10001\s+10001$/m);
    const root = await podman.run(["exec", name, "sh", "-c", "echo x > /srv/llamadock/probe"], { allowFailure: true });
    expect(root.code).not.toBe(0);
    expect(root.stderr).toMatch(/read-only file system/i);
    await podman.run(["exec", name, "sh", "-c", "echo x > /models/probe && rm /models/probe"]);
  });

  it("answers /livez through the published port, and its HEALTHCHECK passes", async () => {
    expect((await ask(target(), "GET", "/livez")).json()).toEqual({ status: "alive" });
    const { stdout } = await podman.run(["image", "inspect", "--format", "{{json .Config.Healthcheck.Test}}", IMAGE]);
    expect(stdout).toContain("/livez");
    await podman.run(["healthcheck", "run", name]);
    const health = await podman.run(["inspect", "--format", "{{.State.Health.Status}}", name]);
    expect(health.stdout.trim()).toBe("healthy");
  });

  it("asks for the API key on its published port", async () => {
    expect((await ask(target(), "GET", "/models")).status).toBe(401);
    expect((await ask(target(), "GET", "/models", undefined, AUTH)).status).toBe(200);
  });

  it("pulls with `llamadock pull` in the container from a registry on the host", async () => {
    for (const repository of ["test/tiny", "test/embed"]) {
      await podman.run(["exec", name, "llamadock", "pull", model(repository)], { timeoutMs: 120_000 });
    }
    const models = (await ask(target(), "GET", "/models", undefined, AUTH)).json() as { tags: string[] }[];
    expect(models.flatMap((m) => m.tags).sort()).toEqual([model("test/embed"), model("test/tiny")]);
  }, 240_000);

  it("answers a chat and an embedding through the published port", async () => {
    const chat = await ask(target(), "POST", "/engines/v1/chat/completions", { model: model("test/tiny"), messages: [{ role: "user", content: "hi" }], max_tokens: 4 }, AUTH);
    expect(chat.status, chat.body).toBe(200);
    expect(chat.json().choices[0].message.role).toBe("assistant");
    const embedding = await ask(target(), "POST", "/engines/v1/embeddings", { model: model("test/embed"), input: "a photo of a cat" }, AUTH);
    expect(embedding.status, embedding.body).toBe(200);
    expect(embedding.json().data[0].embedding).toHaveLength(64);
  }, 180_000);

  it("ends on SIGTERM within the grace period, leaving no process behind", async () => {
    // Every process of the container, by its host pid: the server and its llama-server runners.
    const top = await podman.run(["top", name, "hpid", "args"]);
    const processes = top.stdout.trim().split("\n").slice(1).map((line) => ({ pid: Number(line.trim().split(/\s+/)[0]), args: line.trim().split(/\s+/).slice(1).join(" ") }));
    expect(processes.filter((p) => p.args.includes("llama-server")).length).toBeGreaterThan(0);
    await podman.run(["stop", "--time", String(GRACE_S), name], { timeoutMs: (GRACE_S + 30) * 1000 });
    // Exit status 0: the server stopped itself (a SIGKILL at the end of the grace gives 137).
    const { stdout } = await podman.run(["inspect", "--format", "{{.State.Status}} {{.State.ExitCode}}", name]);
    expect(stdout.trim()).toBe("exited 0");
    const logs = await podman.run(["logs", name]);
    expect(logs.stdout + logs.stderr).toMatch(/SIGTERM received[\s\S]*stopped/);
    expect(processes.filter((p) => existsSync(`/proc/${p.pid}`))).toEqual([]);
  }, 120_000);

  it("still has the pulled models after it starts again", async () => {
    await podman.run(["start", name]);
    await started();
    const models = (await ask(target(), "GET", "/models", undefined, AUTH)).json() as { tags: string[] }[];
    expect(models.flatMap((m) => m.tags)).toContain(model("test/tiny"));
    const chat = await ask(target(), "POST", "/engines/v1/chat/completions", { model: model("test/tiny"), messages: [{ role: "user", content: "hi" }], max_tokens: 4 }, AUTH);
    expect(chat.status, chat.body).toBe(200);
  }, 180_000);
});
