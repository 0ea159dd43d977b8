import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { writeFile } from "node:fs/promises";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ask } from "../support/http.ts";
import { tinyProjectorGguf } from "../support/tiny-projector.ts";
import { startStack, type Stack } from "./harness.ts";

// Media URLs in every place each dialect carries them, against the server as it runs (Bun, real
// runners): with remote media allowed, a name that resolves to this machine is refused where the
// connection would be made, and with remote media off every URL is refused. A media host on
// loopback records any request: none may reach it, from us or from llama-server. The model reads
// media (it has a projector): a model that reads none refuses them before any is fetched.

let stack: Stack;
let host: Server;
const hits: string[] = [];
let port = 0;
const SEEING = { "ai/tiny": tinyProjectorGguf() };

beforeAll(async () => {
  host = createServer((request, response) => {
    hits.push(request.url ?? "");
    response.writeHead(200, { "content-type": "image/png" }).end("not really a png");
  });
  await new Promise<void>((resolve) => host.listen(0, "127.0.0.1", resolve));
  port = (host.address() as AddressInfo).port;
  stack = await startStack({ models: ["ai/blind"], withProjector: SEEING, env: { ALLOW_REMOTE_MEDIA: "true" } });
}, 180_000);
afterAll(async () => {
  await stack?.stop();
  host?.closeAllConnections();
  await new Promise((resolve) => host?.close(resolve));
});

const model = "ai/tiny";
/** Each dialect's places for a media URL: [name, path, body, the error's message as that dialect shapes it]. */
const places = (url: string): [string, string, object, (body: any) => string][] => {
  const openai = (body: any) => `${body.error.code}: ${body.error.message}`;
  const anthropic = (body: any) => `${body.type}/${body.error.type}: ${body.error.message}`;
  const ollama = (body: any) => String(body.error);
  return [
    ["OpenAI chat image_url", "/v1/chat/completions", { model, messages: [{ role: "user", content: [{ type: "image_url", image_url: { url } }] }] }, openai],
    ["OpenAI chat input_audio", "/engines/v1/chat/completions", { model, messages: [{ role: "user", content: [{ type: "input_audio", input_audio: { data: url, format: "wav" } }] }] }, openai],
    ["OpenAI chat, an image in a tool message", "/v1/chat/completions", { model, messages: [{ role: "user", content: "x" }, { role: "tool", tool_call_id: "c", content: [{ type: "image_url", image_url: { url } }] }] }, openai],
    ["Responses input_image", "/v1/responses", { model, input: [{ role: "user", content: [{ type: "input_image", image_url: url }] }] }, openai],
    ["Responses input_image in a function_call_output", "/v1/responses", { model, input: [{ type: "function_call_output", call_id: "c", output: [{ type: "input_image", image_url: url }] }] }, openai],
    ["Anthropic image source", "/v1/messages", { model, max_tokens: 4, messages: [{ role: "user", content: [{ type: "image", source: { type: "url", url } }] }] }, anthropic],
    [
      "Anthropic image inside a tool_result",
      "/v1/messages",
      { model, max_tokens: 4, messages: [{ role: "user", content: [{ type: "tool_result", tool_use_id: "t", content: [{ type: "image", source: { type: "url", url } }] }] }] },
      anthropic,
    ],
    ["Anthropic count_tokens", "/v1/messages/count_tokens", { model, messages: [{ role: "user", content: [{ type: "image", source: { type: "url", url } }] }] }, anthropic],
    ["Ollama chat images", "/api/chat", { model, stream: false, messages: [{ role: "user", content: "what is this?", images: [url] }] }, ollama],
    ["Ollama generate images", "/api/generate", { model, stream: false, prompt: "what is this?", images: [url] }, ollama],
  ];
};

describe("with remote media allowed", () => {
  it.each(places("http://localhost:PORT/cat.png"))("%s naming localhost is refused (it resolves to loopback)", async (_, path, body, message) => {
    const answer = await ask({ url: stack.url }, "POST", path, JSON.parse(JSON.stringify(body).replace("PORT", String(port))));
    expect(answer.status).toBe(400);
    expect(message(answer.json())).toMatch(/media URL refused: localhost resolves to (127\.0\.0\.1|::1), not a public address/);
  });

  it.each(places("http://127.0.0.1:PORT/cat.png"))("%s naming 127.0.0.1 is refused", async (_, path, body, message) => {
    const answer = await ask({ url: stack.url }, "POST", path, JSON.parse(JSON.stringify(body).replace("PORT", String(port))));
    expect(answer.status).toBe(400);
    expect(message(answer.json())).toMatch(/127\.0\.0\.1 is not a public address/);
  });

  it("the media host was never asked for anything, by us or by llama-server", () => {
    expect(hits).toEqual([]);
  });
});

describe("decisions, as chat: the projector checked and the key admitted before an image is fetched", () => {
  const url = () => `http://localhost:${port}/cat.png`;
  const about = (model: string, image?: string) => ({
    model,
    input: [{ role: "user", content: [{ type: "input_text", text: "A picture." }, ...(image ? [{ type: "input_image", image_url: image }] : [])] }],
    questions: [{ type: "predicate", instructions: "It is red." }],
  });

  it("a model without a projector refuses an image by URL as it refuses one inline, fetching nothing", async () => {
    const answer = await ask({ url: stack.url }, "POST", "/v1/decisions", about("ai/blind", url()));
    expect(answer.status).toBe(400);
    expect(answer.json().error).toMatchObject({ code: "images_not_supported" });
  });

  it("a key past its limit is refused (429) before an image by URL is fetched, in decisions as in chat", async () => {
    await writeFile(join(stack.dir, "keys"), "sk-media-once name=once rpm=1\n");
    await stack.restart({ ALLOW_REMOTE_MEDIA: "true", API_KEYS_FILE: join(stack.dir, "keys") });
    const once = { authorization: "Bearer sk-media-once" };
    expect((await ask({ url: stack.url }, "POST", "/v1/decisions", about(model), once)).status).toBe(200);
    const decision = await ask({ url: stack.url }, "POST", "/v1/decisions", about(model, url()), once);
    expect([decision.status, decision.json().error.code]).toEqual([429, "rate_limit_exceeded"]);
    const chat = await ask({ url: stack.url }, "POST", "/v1/chat/completions", { model, messages: [{ role: "user", content: [{ type: "image_url", image_url: { url: url() } }] }] }, once);
    expect([chat.status, chat.json().error.code]).toEqual([429, "rate_limit_exceeded"]);
    expect(hits).toEqual([]);
  });
});

describe("with remote media off", () => {
  beforeAll(async () => {
    await stack.restart({ ALLOW_REMOTE_MEDIA: "false" });
  }, 60_000);

  it.each(places("https://example.com/cat.png"))("%s is refused", async (_, path, body, message) => {
    const answer = await ask({ url: stack.url }, "POST", path, body);
    expect(answer.status).toBe(400);
    expect(message(answer.json())).toMatch(/remote media are off \(ALLOW_REMOTE_MEDIA\)/);
  });
});

describe.each(["node", "deno"] as const)("under %s too", (runtime) => {
  let other: Stack;
  beforeAll(async () => {
    other = await startStack({ runtime, models: [], withProjector: SEEING, env: { ALLOW_REMOTE_MEDIA: "true" } });
  }, 180_000);
  afterAll(async () => {
    await other?.stop();
  });

  it("a Responses input_image naming localhost is refused where the connection would be made", async () => {
    const [, path, body, message] = places(`http://localhost:${port}/cat.png`)[3]!;
    const answer = await ask({ url: other.url }, "POST", path, body);
    expect(answer.status).toBe(400);
    expect(message(answer.json())).toMatch(/media URL refused: localhost resolves to (127\.0\.0\.1|::1), not a public address/);
    expect(hits).toEqual([]);
  });
});
