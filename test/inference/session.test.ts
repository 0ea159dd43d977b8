import { describe, expect, it } from "vitest";
import { openingOf, prefixOf, sessionOf } from "../../src/inference/session.ts";
import { inSlot } from "../../src/inference/forward.ts";

// What a request's session and start are read from, as each agent sends them.

describe("the session a request belongs to", () => {
  it.each<[string, Record<string, string>, unknown, string | undefined]>([
    ["Claude Code's header", { "x-claude-code-session-id": "cc-1" }, { metadata: { user_id: "u" } }, "cc-1"],
    ["Codex's header", { "session-id": "cx-1" }, { prompt_cache_key: "cx-1" }, "cx-1"],
    ["the header's other spelling", { session_id: "cx-2" }, {}, "cx-2"],
    // As launch sets each up, measured: pi sends its session in three headers, Qwen Code in the one launch names.
    ["pi's headers", { session_id: "pi-1", "x-client-request-id": "pi-1", "x-session-affinity": "pi-1" }, { messages: [] }, "pi-1"],
    ["pi's affinity header alone", { "x-session-affinity": "pi-2" }, { messages: [] }, "pi-2"],
    ["Qwen Code's header", { session_id: "qw-1" }, { messages: [] }, "qw-1"],
    // Copilot CLI and Droid on Responses: the session (Copilot's digest of it, Droid's id) as prompt_cache_key only.
    ["Copilot CLI's prompt_cache_key", { "x-initiator": "user", "x-interaction-type": "conversation-user" }, { prompt_cache_key: "2eddc13365024a78b5ee1aad39a6ce45", store: false }, "2eddc13365024a78b5ee1aad39a6ce45"],
    ["Droid's prompt_cache_key", {}, { prompt_cache_key: "22d78522-c324-4791-811a-0d728e42b3e5", store: false }, "22d78522-c324-4791-811a-0d728e42b3e5"],
    ["OpenAI's prompt_cache_key", {}, { prompt_cache_key: "k", user: "u" }, "k"],
    ["Anthropic's metadata.user_id", {}, { metadata: { user_id: "user_abc" } }, "user_abc"],
    ["OpenAI's user", {}, { user: "u-7" }, "u-7"],
    ["none", {}, { messages: [] }, undefined],
    ["empty or not a string: none", {}, { user: "", prompt_cache_key: 3, metadata: null }, undefined],
  ])("%s", (_story, headers, body, session) => {
    expect(sessionOf(new Headers(headers), body)).toBe(session);
  });

  it("a name is kept to 200 characters", () => {
    expect(sessionOf(new Headers(), { user: "x".repeat(500) })).toHaveLength(200);
  });
});

describe("the start of a prompt", () => {
  const tools = [{ type: "function", function: { name: "read" } }];
  const chat = (system: string, user: string) => ({ messages: [{ role: "system", content: system }, { role: "user", content: user }], tools });

  it("two chats with one system prompt and tools share it, whatever follows", () => {
    expect(prefixOf(chat("be brief", "hi"))).toBe(prefixOf(chat("be brief", "something else")));
    expect(prefixOf(chat("be brief", "hi"))).not.toBe(prefixOf(chat("be long", "hi")));
    expect(prefixOf({ ...chat("be brief", "hi"), tools: [] })).not.toBe(prefixOf(chat("be brief", "hi")));
  });

  it("is read from Anthropic's system, Responses' instructions and developer items", () => {
    expect(prefixOf({ system: "s", messages: [{ role: "user", content: "a" }] })).toBe(prefixOf({ system: "s", messages: [{ role: "user", content: "b" }] }));
    expect(prefixOf({ instructions: "i", input: "a" })).toBe(prefixOf({ instructions: "i", input: "b" }));
    expect(prefixOf({ input: [{ role: "developer", content: "d" }, { role: "user", content: "a" }] })).toBe(prefixOf({ input: [{ role: "developer", content: "d" }, { role: "user", content: "b" }] }));
  });

  it("none for a prompt without one (a bare completion, a chat without system prompt or tools)", () => {
    expect(prefixOf({ prompt: "once upon" })).toBeUndefined();
    expect(prefixOf({ messages: [{ role: "user", content: "a" }], tools: [] })).toBeUndefined();
  });
});

describe("how a conversation opened", () => {
  const system = { role: "system", content: "You are a helper." };
  it("is its first message after the start: the same on every turn, another for another conversation", () => {
    const first = { role: "user", content: "Summarise the report." };
    const opened = openingOf({ messages: [system, first] });
    expect(opened).toMatch(/^[0-9a-f]{32}$/);
    expect(openingOf({ messages: [system, first, { role: "assistant", content: "It says..." }, { role: "user", content: "Shorter." }] })).toBe(opened);
    expect(openingOf({ messages: [system, { role: "user", content: "Translate the report." }] })).not.toBe(opened);
    expect(openingOf({ input: [{ role: "developer", content: "x" }, first] })).toBe(opened);
  });

  it("a Responses input given as a string opens with that string; nothing after the start, nothing", () => {
    expect(openingOf({ input: "Hello" })).toMatch(/^[0-9a-f]{32}$/);
    expect(openingOf({ messages: [system] })).toBeUndefined();
    expect(openingOf({ prompt: "x" })).toBeUndefined();
  });
});

describe("a body sent to one slot", () => {
  const bytes = (text: string) => new TextEncoder().encode(text) as Uint8Array<ArrayBuffer>;
  const text = (b: Uint8Array) => new TextDecoder().decode(b);

  it("names the slot first, the body otherwise as it came", () => {
    expect(JSON.parse(text(inSlot(bytes(' \n{"model":"m","stream":true}'), 3)))).toEqual({ id_slot: 3, model: "m", stream: true });
  });

  it("a client's own id_slot comes later, and wins where llama-server reads the last", () => {
    expect(text(inSlot(bytes('{"id_slot":-1,"model":"m"}'), 1))).toBe('{"id_slot":1,"id_slot":-1,"model":"m"}');
  });
});
