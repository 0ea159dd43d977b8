import { describe, expect, it } from "vitest";
import { loadConfig } from "../../src/config.ts";
import { createDrain } from "../../src/pod/drain.ts";
import { createPinned } from "../../src/pod/pinned.ts";
import type { RunnerInfo } from "../../src/scheduler/scheduler.ts";
import type { ModelRef } from "../../src/scheduler/types.ts";

// The pod's pieces alone: which models a replica admits, what readiness reports, the drain gate, and
// their settings. (test/pod/pod.test.ts runs them together through a real process.)

const model = (name: string): ModelRef => ({ id: `sha256:${name}`, tags: [`ai/${name}:latest`], ggufPath: `${name}.gguf` });

function setup(allowUnpinned: boolean) {
  const runners: RunnerInfo[] = [];
  const preloads: string[] = [];
  let pin!: () => void;
  const pinned = createPinned({
    references: ["ai/a"],
    allowUnpinned,
    store: { resolve: async (reference) => (reference === "ai/a" ? model("a") : undefined) },
    pull: async () => {},
    log: () => {},
  });
  pinned.start({
    pin: () => new Promise<void>((resolve) => (pin = resolve)),
    preload: (m) => void preloads.push(m.id),
    runners: () => runners,
  });
  const ready = () => {
    runners.push({ model: "ai/a:latest", modelId: "sha256:a", mode: "completion", state: "ready", inUse: 0, waiting: 0, lastUsed: 0, keepAlive: "-1", threads: 1, pinned: true });
    pin();
  };
  return { pinned, preloads, ready };
}

const settle = () => new Promise((resolve) => setTimeout(resolve, 0));

describe("pinned models", () => {
  it("admit only the pinned model, and are not ready until its runner is", async () => {
    const { pinned, preloads, ready } = setup(false);
    expect(pinned.admits("sha256:a")).toBe(false); // not even resolved yet
    expect(pinned.problem()).toBe("pinned model ai/a is not in the store yet");
    await settle();
    expect(pinned.admits("sha256:a")).toBe(true);
    expect(pinned.admits("sha256:b")).toBe(false);
    expect(pinned.problem()).toBe("pinned model ai/a is loading");
    expect(preloads).toEqual(["sha256:a"]); // a runner that failed to load is asked for again
    ready();
    expect(pinned.problem()).toBeUndefined();
    pinned.stop();
  });

  it("admit every model with ALLOW_UNPINNED_MODELS", async () => {
    const { pinned } = setup(true);
    expect(pinned.admits("sha256:b")).toBe(true);
    pinned.stop();
  });
});

describe("drain", () => {
  it("answers 503 JSON to new requests once draining, except on the open paths; waits for idle or the grace", async () => {
    const drain = createDrain();
    const handler = drain.wrap(() => new Response("ok"), ["/readyz"]);
    expect(await (await handler(new Request("http://x/v1/models"))).text()).toBe("ok");
    let idle = false;
    const drained = drain.drain(60_000, () => idle);
    const refused = await handler(new Request("http://x/v1/models"));
    expect(refused.status).toBe(503);
    expect(refused.headers.get("retry-after")).toBe("1");
    expect(await refused.json()).toMatchObject({ error: { type: "unavailable_error", code: "shutting_down" } });
    expect((await handler(new Request("http://x/readyz"))).status).toBe(200);
    idle = true;
    await drained;
    await drain.drain(0, () => false); // no grace left: at once
  });
});

describe("settings", () => {
  it("read the pinned models, the unpinned switch and whether the probes are open", () => {
    const config = loadConfig({ PINNED_MODELS: " ai/a , hf.co/b/c:Q4 ", OPEN_PATHS: "/metrics" }, []);
    expect(config.pod).toEqual({ pinnedModels: ["ai/a", "hf.co/b/c:Q4"], allowUnpinned: false });
    expect(config.security.openPaths).toEqual(["/metrics", "/livez", "/readyz"]);
    const closed = loadConfig({ ALLOW_UNPINNED_MODELS: "true", HEALTH_PATHS_OPEN: "false" }, []);
    expect(closed.pod).toEqual({ pinnedModels: [], allowUnpinned: true });
    expect(closed.security.openPaths).toEqual([]);
  });
});
