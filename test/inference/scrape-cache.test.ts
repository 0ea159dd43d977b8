import { describe, expect, it } from "vitest";
import { engineRoutes } from "../../src/inference/engines.ts";
import { createMetrics } from "../../src/inference/metrics.ts";
import { routeTable } from "../../src/http/router.ts";
import { sharedFor } from "../../src/inference/scrape-cache.ts";
import type { Scheduler } from "../../src/scheduler/scheduler.ts";
import type { SettingsStore } from "../../src/scheduler/settings.ts";

// /metrics reads the runners' figures at most once a second, however often (and by however many
// at once) it is scraped: it is an open path, and each reading asks every runner twice.

describe("sharedFor", () => {
  it("shares a reading for its period from its start, then reads again; a failed reading is not kept", async () => {
    let time = 0;
    let reads = 0;
    let fail = false;
    const read = sharedFor(1000, async () => {
      reads += 1;
      if (fail) throw new Error("runner gone");
      return reads;
    }, () => time);
    expect(await Promise.all([read(), read(), read()])).toEqual([1, 1, 1]);
    time = 999;
    expect(await read()).toBe(1);
    time = 1000;
    expect(await read()).toBe(2);
    fail = true;
    time = 2000;
    await expect(read()).rejects.toThrow("runner gone");
    fail = false;
    expect(await read()).toBe(4);
    expect(reads).toBe(4);
  });
});

describe("GET /metrics", () => {
  it("asks the runners once for a burst of scrapes", async () => {
    const asked: string[] = [];
    const scheduler = {
      runners: () => [],
      scrape: async (path: string) => {
        asked.push(path);
        await new Promise((resolve) => setTimeout(resolve, 20));
        return [{ model: "ai/a:latest", mode: "completion", text: "llamacpp:requests_processing 0\n" }];
      },
    } as unknown as Scheduler;
    const handler = routeTable(
      engineRoutes({
        store: { resolve: async () => undefined },
        scheduler,
        settings: {} as SettingsStore,
        metrics: createMetrics(),
        engineVersion: async () => "test",
        diskUsage: async () => ({}) as never,
      }),
    );
    const scrapes = await Promise.all(Array.from({ length: 10 }, () => handler(new Request("http://runner/metrics"))));
    const texts = await Promise.all(scrapes.map((response) => response.text()));
    const merged = 'llamacpp:requests_processing{backend="llama.cpp",model="ai/a:latest",mode="completion"} 0';
    expect(texts.filter((text) => !text.includes(merged))).toEqual([]);
    expect(asked).toEqual(["/metrics", "/slots"]);
  });
});
