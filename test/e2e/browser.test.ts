import { spawn } from "node:child_process";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startStack, type Stack } from "../inference/harness.ts";
import { ask } from "../support/http.ts";

// A real browser (Debian's chromium, headless) opens a page served from another origin on
// loopback; the page tries what a malicious site would (text/plain POSTs that need no preflight,
// a preflighted JSON POST) against the model runner. The runner must see no effect. A page on an
// allowed origin (localhost) reads the API through CORS, proof that the browser really calls us.

let stack: Stack;
let pages: Server;
beforeAll(async () => {
  stack = await startStack({ models: ["ai/tiny"] });
  await ask({ url: stack.url }, "POST", "/v1/completions", { model: "ai/tiny", prompt: "a", max_tokens: 1 });
  pages = createServer((request, response) => {
    response.writeHead(200, { "content-type": "text/html" });
    response.end(request.url?.startsWith("/attack") ? attackPage(stack.url) : readerPage(stack.url));
  });
  // 127.0.0.2 is loopback too, but a different origin from the runner's and not an allowed one.
  await new Promise<void>((resolve) => pages.listen(0, "127.0.0.2", resolve));
});
afterAll(async () => {
  pages?.close();
  await stack?.stop();
});

const script = (body: string) => `<!doctype html><html><body><pre id="out">running</pre><script>
const out = document.getElementById("out");
const log = [];
(async () => { ${body} })().catch((e) => log.push("error " + e)).finally(() => { out.textContent = "done " + JSON.stringify(log); });
</script></body></html>`;

function attackPage(runner: string): string {
  return script(`
    for (const [path, body] of [["/v1/chat/completions", {model: "ai/tiny", messages: [{role: "user", content: "burn"}]}],
                                ["/models/create", {from: "ai/huge"}], ["/engines/unload", {all: true}]]) {
      try { await fetch("${runner}" + path, { method: "POST", headers: { "content-type": "text/plain" }, body: JSON.stringify(body) }); log.push(path + " read"); }
      catch (e) { log.push(path + " blocked"); }
    }
    try { await fetch("${runner}/engines/unload", { method: "POST", headers: { "content-type": "application/json" }, body: '{"all":true}' }); log.push("json read"); }
    catch (e) { log.push("json blocked"); }
  `);
}

function readerPage(runner: string): string {
  return script(`
    const models = await (await fetch("${runner}/models")).json();
    log.push("models " + models.length);
    const ps = await (await fetch("${runner}/engines/ps", { headers: { "content-type": "application/json" } })).json();
    log.push("runners " + ps.length);
  `);
}

/** The runner's request counters (by route and status), as /metrics shows them. */
async function requestCounts(): Promise<string[]> {
  const text = (await ask({ url: stack.url }, "GET", "/metrics")).body;
  return text.split("\n").filter((line) => line.startsWith("llamadock_requests_total"));
}

/** Opens `url` in headless chromium and returns the page's text once its script is done. */
function browse(url: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const args = ["--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run", "--virtual-time-budget=15000", "--dump-dom", url];
    const child = spawn("chromium", args, { stdio: ["ignore", "pipe", "pipe"] });
    let dom = "";
    child.stdout.on("data", (chunk: Buffer) => (dom += chunk));
    child.once("error", reject);
    child.once("close", () => resolve(/<pre id="out">([^<]*)<\/pre>/.exec(dom)?.[1] ?? dom));
  });
}

describe("in a real browser", () => {
  it("a page on a foreign origin gets nothing through and changes nothing", async () => {
    const before = await requestCounts();
    const port = (pages.address() as AddressInfo).port;
    const text = await browse(`http://127.0.0.2:${port}/attack`);
    expect(text).toBe(`done ${JSON.stringify(["/v1/chat/completions blocked", "/models/create blocked", "/engines/unload blocked", "json blocked"])}`);
    // No route ran: no request was counted, the runner is still loaded, no model was added.
    expect(await requestCounts()).toEqual(before);
    expect((await ask({ url: stack.url }, "GET", "/engines/ps")).json()).toHaveLength(1);
    expect((await ask({ url: stack.url }, "GET", "/models")).json()).toHaveLength(1);
  });

  it("a page on an allowed origin (localhost) reads the API", async () => {
    const local = createServer((_request, response) => (response.writeHead(200, { "content-type": "text/html" }), response.end(readerPage(stack.url))));
    await new Promise<void>((resolve) => local.listen(0, "127.0.0.1", resolve));
    try {
      const text = await browse(`http://localhost:${(local.address() as AddressInfo).port}/`);
      expect(text).toBe(`done ${JSON.stringify(["models 1", "runners 1"])}`);
    } finally {
      local.close();
    }
  });
});
