import { describe, expect, it } from "vitest";
import { startStack } from "../inference/harness.ts";
import { ask } from "../support/http.ts";
import type { RuntimeName } from "../support/server-process.ts";

// The page and its two streams on each runtime: the page for a browser, the first live-state
// event, a followed log that shows what a request appends, a server still serving after its
// stream clients left, and streams that end when the server stops.

/** Reads `response` until `done(text)` holds, then leaves (cancels the body). */
async function readUntil(response: Response, done: (text: string) => boolean): Promise<string> {
  const reader = response.body!.pipeThrough(new TextDecoderStream()).getReader();
  let text = "";
  try {
    while (!done(text)) {
      const { value, done: ended } = await reader.read();
      if (ended) throw new Error(`the stream ended early: ${text}`);
      text += value;
    }
    return text;
  } finally {
    await reader.cancel();
  }
}

describe.each<RuntimeName>(["node", "deno", "bun"])("under %s", (runtime) => {
  it("serves the page, the events stream and a followed log", async () => {
    const stack = await startStack({ runtime, models: ["ai/tiny"] });
    try {
      const page = await ask({ url: stack.url }, "GET", "/", undefined, { accept: "text/html" });
      expect(page.body).toContain("<title>llamadock</title>");
      expect((await ask({ url: stack.url }, "POST", "/v1/completions", { model: "ai/tiny", prompt: "a", max_tokens: 1 })).status).toBe(200);

      const events = await fetch(`${stack.url}/engines/events`);
      expect(events.headers.get("content-type")).toBe("text/event-stream");
      const first = await readUntil(events, (t) => /event: state\ndata: .*\n\n/.test(t));
      const state = JSON.parse(/data: (.*)\n/.exec(first)![1]!);
      expect(state.runners).toMatchObject([{ model: "ai/tiny:latest", mode: "completion", state: "ready" }]);
      expect(state.models.map((m: { name: string }) => m.name)).toEqual(["ai/tiny:latest"]);

      const log = await fetch(`${stack.url}/engines/logs?model=ai/tiny&follow=true`);
      expect(log.status).toBe(200);
      const appended = readUntil(log, (t) => t.includes("llama_server: listening") && (t.match(/print_timing/g) ?? []).length >= 8);
      // Each completion adds its four timing lines to the log: the second one's show up while following.
      await new Promise((resolve) => setTimeout(resolve, 500));
      await ask({ url: stack.url }, "POST", "/v1/completions", { model: "ai/tiny", prompt: "b", max_tokens: 2 });
      expect(await appended).toContain("print_timing");
      expect((await ask({ url: stack.url }, "GET", "/engines/ps")).status).toBe(200);

      // Stopping the server ends the open streams cleanly (they would otherwise hold it up).
      const open = [await fetch(`${stack.url}/engines/events`), await fetch(`${stack.url}/engines/logs?model=ai/tiny&follow=true`)];
      stack.server.child.kill("SIGTERM");
      for (const response of open) await expect(response.text()).resolves.toEqual(expect.any(String));
      expect(await stack.server.exited).toBe(0);
    } finally {
      await stack.stop();
    }
  }, 60_000);
});
