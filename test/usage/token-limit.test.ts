import { writeFile } from "node:fs/promises";
import { join } from "node:path";
import { afterAll, beforeAll, expect, it } from "vitest";
import { ask, type Target } from "../support/http.ts";
import { NO_EARLY_STOP, startStack, type Stack } from "../inference/harness.ts";

// A key's tokens per minute, through real HTTP and a real runner: once the minute holds them, 429
// with Retry-After, and admitted again once they aged out. A file of its own (the other limits are
// in usage.test.ts): it waits out the Retry-After, most of a minute, which it does beside other
// files that wait.

const CAROL = "sk-carol-5e81aa";
const as = (key: string) => ({ authorization: `Bearer ${key}` });
const chat = { model: "ai/tiny", messages: [{ role: "user", content: "hello there" }], max_tokens: 3, ...NO_EARLY_STOP };

let stack: Stack;
let tcp: Target;

beforeAll(async () => {
  stack = await startStack({ models: ["ai/tiny"] });
  await writeFile(join(stack.dir, "keys"), `${CAROL} name=carol tpm=10\n`);
  await stack.restart({ API_KEYS_FILE: join(stack.dir, "keys") });
  tcp = { url: stack.url };
}, 180_000);
afterAll(async () => {
  await stack?.stop();
});

const post = (body: object) => ask(tcp, "POST", "/v1/chat/completions", body, as(CAROL));

it("tokens per minute: once the minute holds them, 429 until they age out", async () => {
  const first = await post({ ...chat, max_tokens: 12 });
  expect(first.status).toBe(200);
  expect(first.headers["x-ratelimit-limit-tokens"]).toBe("10");
  const second = await post(chat);
  expect(second.status).toBe(429);
  expect(second.json().error.message).toContain("tokens per min");
  expect(second.headers["x-ratelimit-remaining-tokens"]).toBe("0");
  const retryAfter = Number(second.headers["retry-after"]);
  expect(retryAfter).toBeGreaterThan(1);
  // Refused again before then; admitted once Retry-After has passed (the first answer's tokens aged out).
  expect((await post(chat)).status).toBe(429);
  await new Promise((resolve) => setTimeout(resolve, retryAfter * 1000));
  const later = await post(chat);
  expect(later.status, later.body).toBe(200);
  expect(later.headers["x-ratelimit-remaining-tokens"]).toBe("10");
}, 120_000);
