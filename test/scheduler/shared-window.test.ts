import { writeFile } from "node:fs/promises";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startStack, type Stack } from "../inference/harness.ts";
import { ask } from "../support/http.ts";
import { until } from "../support/until.ts";

// The fair queue's "shared" rule end to end: the server as users run it, a real llama-server with
// 2 slots, two keys. While both keys use the runner, a key holding a slot leaves the last one for
// the other; once the other has been quiet for the window (10 s), the held-back request must start,
// though the key's first request (an endless generation) still runs. Before the fix nothing granted
// it then: it waited, a slot free, until that first request ended.

const KEYS = { a: "sk-a-4e1d90", b: "sk-b-77c3f2" };
const as = (key: string) => ({ authorization: `Bearer ${key}` });

let stack: Stack;
beforeAll(async () => {
  stack = await startStack({ models: ["ai/tiny"] });
  await writeFile(join(stack.dir, "keys"), `${KEYS.a} name=a\n${KEYS.b} name=b\n`);
  await stack.restart({ API_KEYS_FILE: join(stack.dir, "keys"), INFERENCE_SLOTS: "2" });
  // The endless generation goes on past the tiny context of 512 tokens.
  expect((await ask({ socketPath: stack.socket }, "POST", "/engines/_configure", { model: "ai/tiny", "runtime-flags": ["--context-shift"] })).status).toBe(202);
}, 180_000);
afterAll(async () => {
  await stack?.stop();
});

const tcp = () => ({ url: stack.url });
const chat = { model: "ai/tiny", messages: [{ role: "user", content: "hi" }], max_tokens: 4 };
const waiting = async () => ((await ask(tcp(), "GET", "/engines/ps", undefined, as(KEYS.a))).json() as { waiting: number }[])[0]?.waiting ?? 0;

describe("a request held back for another key", () => {
  it("regression (the slot left idle): starts once the other key has been quiet for the window, while its key's first request still runs", async () => {
    // a's endless generation holds one slot.
    const long = await fetch(`${stack.url}/v1/completions`, {
      method: "POST",
      headers: { "content-type": "application/json", ...as(KEYS.a) },
      body: JSON.stringify({ model: "ai/tiny", prompt: "x", max_tokens: 1_000_000, ignore_eos: true, stream: true }),
    });
    expect(long.status).toBe(200);
    const reader = long.body!.getReader();
    await reader.read();
    // b uses the runner and leaves; a's second request is held back: the free slot is b's to take.
    expect((await ask(tcp(), "POST", "/v1/chat/completions", chat, as(KEYS.b))).status).toBe(200);
    let answered = false;
    const second = ask(tcp(), "POST", "/v1/chat/completions", chat, as(KEYS.a)).finally(() => (answered = true));
    await until(async () => (await waiting()) === 1, "a's second request to wait");
    expect(answered).toBe(false);
    // b stays quiet: a's second request is served (bounded wait), a's first still streaming.
    await until(() => answered, "a's second request to be served");
    expect((await second).status).toBe(200);
    const { done } = await reader.read();
    expect(done).toBe(false);
    await reader.cancel();
    await until(async () => (await waiting()) === 0, "the runner to be idle");
  });
});
