import { mkdir } from "node:fs/promises";
import { join } from "node:path";
import puppeteer, { type Browser, type Page } from "puppeteer-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startStack, type Stack } from "../inference/harness.ts";
import { ask } from "../support/http.ts";
import { startRegistryFront, type Front } from "../support/registry-front.ts";
import { MODEL_MEDIA, pushModel, startRegistry, type Registry } from "../support/registry.ts";
import { projectRoot } from "../support/server-process.ts";
import { tinyLlamaGguf } from "../support/tiny-gguf.ts";

// The status page in a real browser (Debian's chromium, headless, driven by puppeteer-core) against
// a real model runner: each view, and a screenshot of each under .tmp/screenshots/.

const SHOTS = join(projectRoot, ".tmp", "screenshots");

let stack: Stack;
let fresh: Registry;
let browser: Browser;
let page: Page;

beforeAll(async () => {
  [stack, fresh] = await Promise.all([startStack({ models: ["ai/tiny", "ai/small"] }), startRegistry()]);
  for (const [i, name] of ["ai/pulled", "ai/stalled"].entries()) {
    const license = new Uint8Array(4 << 20).fill(i + 1);
    await pushModel(fresh, name, "latest", tinyLlamaGguf({ seed: 30 + i }), { layers: [{ mediaType: MODEL_MEDIA.license, data: license }] });
  }
  // A loaded runner for the overview.
  await ask({ url: stack.url }, "POST", "/v1/completions", { model: "ai/tiny", prompt: "a", max_tokens: 1 });
  await mkdir(SHOTS, { recursive: true });
  browser = await puppeteer.launch({ executablePath: "/usr/bin/chromium", headless: true, args: ["--no-sandbox", "--disable-gpu", "--no-first-run"] });
  page = await browser.newPage();
  await page.setViewport({ width: 1200, height: 720 });
}, 120_000);
afterAll(async () => {
  await browser?.close();
  await stack?.stop();
  await fresh?.stop();
});

const open = async (view: string) => {
  await page.goto(`${stack.url}/#${view}`, { waitUntil: "domcontentloaded" });
  await page.waitForSelector("#live.on");
};
const text = (selector: string) => page.$eval(selector, (node) => node.textContent ?? "");
const shot = (name: string) => page.screenshot({ path: join(SHOTS, `${name}.png`) });

describe("the page", () => {
  it("is served to browsers at /, with its assets from the package; other clients keep DMR's text", async () => {
    const response = await page.goto(stack.url, { waitUntil: "domcontentloaded" });
    expect(response?.headers()["content-type"]).toBe("text/html; charset=utf-8");
    expect(response?.headers()["content-security-policy"]).toContain("default-src 'self'");
    expect(await page.title()).toBe("llamadock");
    expect((await ask({ url: stack.url }, "GET", "/")).body).toBe("Docker Model Runner is running");
    expect((await ask({ url: stack.url }, "GET", "/web/app.js")).headers["content-type"]).toBe("text/javascript; charset=utf-8");
    expect((await ask({ url: stack.url }, "GET", "/web/..%2Fapp.ts")).status).toBe(404);
  });

  it("overview: the models in the store and the loaded runner, live", async () => {
    await open("overview");
    await page.waitForFunction(() => document.querySelector("#runners tbody")?.textContent?.includes("ready"));
    const runner = await text("#runners tbody tr");
    expect(runner).toMatch(/^ai\/tiny:latestcompletionready00[\d.]+ MB\dm\d\ds$/);
    const models = await page.$$eval("#models-overview tbody tr td.name", (cells) => cells.map((c) => c.textContent));
    expect(models.sort()).toEqual(["ai/small:latest", "ai/tiny:latest"]);
    // Live: a runner loaded elsewhere shows up without a reload.
    await ask({ url: stack.url }, "POST", "/v1/completions", { model: "ai/small", prompt: "a", max_tokens: 1 });
    await page.waitForFunction(() => document.querySelector("#runners tbody")?.textContent?.includes("ai/small:latest"));
    // Each model's last load, how long it took, and that it is ready.
    await page.waitForFunction(() => document.querySelector("#loads tbody")?.textContent?.includes("ai/small:latest"));
    const loads = await page.$$eval("#loads tbody tr", (rows) => rows.map((r) => r.textContent));
    expect(loads.sort()).toEqual([expect.stringMatching(/^ai\/small:latestready\d+\.\d\d s$/), expect.stringMatching(/^ai\/tiny:latestready\d+\.\d\d s$/)]);
    await shot("overview");
  });

  it("overview: a pull in progress shows a bar per layer", async () => {
    // The registry sends the first MiB of each blob and then nothing: the pull stays in progress.
    const stalling: Front = await startRegistryFront(fresh.url, { stallBlobsAfter: 1 << 20 });
    try {
      const controller = new AbortController();
      const pulling = fetch(`${stack.url}/models/create`, { method: "POST", body: JSON.stringify({ from: `${stalling.host}/ai/stalled` }), signal: controller.signal }).then((r) => r.text()).catch(() => "");
      await open("overview");
      await page.waitForFunction(() => document.querySelectorAll("#pulls progress").length === 2);
      expect(await text("#pulls h3")).toBe(`${stalling.host}/ai/stalled:latest`);
      await shot("overview-pulling");
      controller.abort();
      await pulling;
      await page.waitForFunction(() => document.querySelectorAll("#pulls progress").length === 0);
    } finally {
      await stalling.stop();
    }
  });

  it("models: a pull shows its progress and completes; the model's settings are saved", async () => {
    await open("models");
    await page.type("#pull-name", `${fresh.host}/ai/pulled`);
    await page.click("#pull-form button");
    await page.waitForFunction(() => document.querySelector("#pull-result")?.textContent?.includes("Model pulled successfully"));
    const bars = await page.$$eval("#pull-progress progress", (nodes) => nodes.map((n) => [(n as HTMLProgressElement).value, (n as HTMLProgressElement).max]));
    expect(bars).toHaveLength(2);
    for (const [value, max] of bars) expect(value).toBe(max);
    await page.waitForFunction((name) => [...document.querySelectorAll("#models-list td.name")].some((c) => c.textContent === name), {}, `${fresh.host}/ai/pulled:latest`);
    await shot("models");

    const row = `#models-list tr[data-model="ai/tiny:latest"]`;
    await page.type(`${row} input[name=context]`, "1024");
    await page.type(`${row} input[name=keep-alive]`, "15m");
    await page.click(`${row} button`);
    await page.waitForFunction(() => document.querySelector("#models-message")?.textContent?.startsWith("Saved"));
    const settings = (await ask({ url: stack.url }, "GET", "/engines/_configure?model=ai/tiny")).json();
    expect(settings[0].Config).toMatchObject({ "context-size": 1024, keep_alive: "15m" });
  });

  it("playground: the answer streams in, with llama-server's tokens per second", async () => {
    await open("playground");
    await page.waitForFunction(() => (document.querySelector("#chat-model") as HTMLSelectElement).options.length >= 2);
    await page.select("#chat-model", "ai/tiny:latest");
    // Count the answer's updates: a streamed answer grows in several steps.
    await page.evaluate(() => {
      const w = window as unknown as { updates: number };
      w.updates = 0;
      new MutationObserver(() => (w.updates += 1)).observe(document.querySelector("#chat-log")!, { subtree: true, childList: true, characterData: true });
    });
    await page.type("#chat-input", "Tell me a story");
    await page.click("#chat-send");
    await page.waitForFunction(() => /tokens\/s$/.test(document.querySelector("#chat-speed")?.textContent ?? ""), { timeout: 60_000 });
    expect(await text("#chat-log .msg.user")).toBe("Tell me a story");
    expect((await text("#chat-log .msg.assistant")).length).toBeGreaterThan(0);
    expect(await text("#chat-speed")).toMatch(/^\d+ tokens, [\d.]+ tokens\/s$/);
    expect(await page.evaluate(() => (window as unknown as { updates: number }).updates)).toBeGreaterThan(3);
    await shot("playground");
  });

  it("logs: the runner's log, following", async () => {
    await open("logs");
    await page.waitForFunction(() => (document.querySelector("#logs-model") as HTMLSelectElement).options.length >= 2);
    await page.select("#logs-model", "ai/tiny:latest");
    await page.click("#logs-form button");
    await page.waitForFunction(() => document.querySelector("#logs-text")?.textContent?.includes("llama_server: listening"));
    // The runner's own log file, whole, as the API reads it: the page shows a part of it.
    const wholeLog = async () => (await ask({ url: stack.url }, "GET", "/engines/logs?model=ai/tiny&tail=1000000000")).body;
    const shown = await text("#logs-text");
    expect(shown).toContain("llama_server: listening");
    expect(await wholeLog()).toContain(shown);
    // Following: a request served after it was opened shows up without asking again, appended:
    // llama-server's lines for it, to the end of its slot's work (its 2 tokens generated).
    await ask({ url: stack.url }, "POST", "/v1/completions", { model: "ai/tiny", prompt: "more", max_tokens: 2 });
    await page.waitForFunction((n) => document.querySelector("#logs-text")?.textContent?.slice(n).includes("stop processing"), {}, shown.length);
    const followed = await text("#logs-text");
    expect(followed.startsWith(shown)).toBe(true);
    expect(followed.slice(shown.length)).toMatch(/\| +eval time = .* \/ +2 tokens/);
    expect(await wholeLog()).toContain(followed);
    await shot("logs");
  });

  it("sessions: the slot that holds a named session, by key and short id; the prompt tokens a returning turn read from cache, live", async () => {
    await open("sessions");
    // One turn of an agent's session (its start: a system prompt; its name: OpenAI's `user`), then a returning one.
    const first = [{ role: "system", content: "You are a terse agent." }, { role: "user", content: "List the files." }];
    const turn = async (messages: object[]) => {
      const answer = await ask({ url: stack.url }, "POST", "/v1/chat/completions", { model: "ai/tiny", messages, user: "page-session-7f3a", max_tokens: 2, temperature: 0 });
      expect(answer.status, answer.body).toBe(200);
      return answer.json().timings as { prompt_n: number; cache_n: number };
    };
    await turn(first);
    const slots = `#slot-tables .runner-slots[data-model="ai/tiny:latest"] tbody tr`;
    await page.waitForFunction((rows) => [...document.querySelectorAll(rows)].some((r) => r.textContent === `${r.getAttribute("data-slot")}sessionlocalpage-sesidle`), {}, slots);
    /** The cells of the day's row of the local key (no keys asked here) and ai/tiny. */
    const tokenCells = () => page.$$eval("#tokens tbody tr", (rows) => [...(rows.find((r) => r.textContent!.startsWith("localai/tiny:latest"))?.children ?? [])].map((c) => c.textContent));
    const before = Number((await tokenCells())[5] ?? 0);
    const again = await turn([...first, { role: "assistant", content: "a b" }, { role: "user", content: "Open the first." }]);
    expect(again.cache_n).toBeGreaterThan(0);
    // The page shows it without a reload: the day's cached tokens grew by what the returning turn read from its slot.
    await page.waitForFunction(
      (n) => [...document.querySelectorAll("#tokens tbody tr")].some((r) => r.textContent!.startsWith("localai/tiny:latest") && Number(r.querySelector("td.cached")!.textContent) === n),
      {},
      before + again.cache_n,
    );
    const [key, model, requests, prompt, processed, cached, saved] = await tokenCells();
    expect([key, model]).toEqual(["local", "ai/tiny:latest"]);
    expect(Number(prompt)).toBe(Number(processed) + Number(cached));
    expect(Number(requests)).toBeGreaterThan(1);
    expect(saved).toMatch(/^[1-9]\d*%$/);
    expect(await text(`#slot-tables .runner-slots[data-model="ai/tiny:latest"] .parked`)).toBe("Parked: none");
    await shot("sessions");
  });
});
