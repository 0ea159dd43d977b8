import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ask, type Target } from "../support/http.ts";
import { NO_EARLY_STOP, startStack, type Stack } from "./harness.ts";

// Stored Responses on a shared server, through real HTTP and real runners: each is kept for the API
// key that made it (any other key gets 404 on get, continue and delete), and the store keeps no
// more bytes than RESPONSES_STORE_MAX_BYTES, dropping the least recently used first.

const KEY_A = "key-of-alice";
const KEY_B = "key-of-bob";
const as = (key: string) => ({ authorization: `Bearer ${key}` });

let stack: Stack;
let tcp: Target;
/** What one stored entry weighs (the store's own measure: its JSON text), set below. */
let entryBytes = 0;

const create = async (key: string, input: string, extra: object = {}) => {
  const answer = await ask(tcp, "POST", "/v1/responses", { model: "ai/tiny", input, max_output_tokens: 2, ...NO_EARLY_STOP, ...extra }, as(key));
  expect(answer.status).toBe(200);
  return answer;
};
const weight = (answer: { body: string }, input: string) => answer.body.length + JSON.stringify([{ role: "user", content: input }]).length;

beforeAll(async () => {
  stack = await startStack({ models: ["ai/tiny"] });
  tcp = { url: stack.url };
  // One response's weight, then the store bounded to three and a half of them.
  entryBytes = weight(await create("", "hello"), "hello");
  await stack.restart({ API_KEYS: `${KEY_A},${KEY_B}`, RESPONSES_STORE_MAX_BYTES: String(Math.floor(3.5 * entryBytes)) });
  tcp = { url: stack.url };
}, 180_000);
afterAll(async () => {
  await stack?.stop();
});

describe("a stored response belongs to the key that made it", () => {
  it("another key gets 404 on get, continue and delete, and the owner still has it after", async () => {
    const made = (await create(KEY_A, "hello")).json() as { id: string };
    const get = (key: string) => ask(tcp, "GET", `/v1/responses/${made.id}`, undefined, as(key));

    const theirs = await get(KEY_B);
    expect([theirs.status, theirs.json().error.type]).toEqual([404, "not_found_error"]);
    const continued = await ask(tcp, "POST", "/v1/responses", { model: "ai/tiny", input: "go on", previous_response_id: made.id, max_output_tokens: 1 }, as(KEY_B));
    expect([continued.status, continued.json().error.code]).toEqual([404, "response_not_found"]);
    expect((await ask(tcp, "DELETE", `/v1/responses/${made.id}`, undefined, as(KEY_B))).status).toBe(404);

    expect((await get(KEY_A)).json().id).toBe(made.id);
    const ours = await ask(tcp, "POST", "/v1/responses", { model: "ai/tiny", input: "go on", previous_response_id: made.id, max_output_tokens: 1 }, as(KEY_A));
    expect(ours.status).toBe(200);
    expect((await ask(tcp, "DELETE", `/v1/responses/${made.id}`, undefined, as(KEY_A))).status).toBe(200);
    expect((await get(KEY_A)).status).toBe(404);
  });

  it("the key may come as x-api-key too; a streamed response is scoped the same", async () => {
    const streamed = await create(KEY_A, "hello", { stream: true });
    const id = /"response\.completed".*?"id":"(resp_[^"]+)"/.exec(streamed.body)?.[1];
    expect(id).toBeDefined();
    expect((await ask(tcp, "GET", `/v1/responses/${id}`, undefined, { "x-api-key": KEY_A })).status).toBe(200);
    expect((await ask(tcp, "GET", `/v1/responses/${id}`, undefined, { "x-api-key": KEY_B })).status).toBe(404);
    // The Unix socket's peer needs no key, and without one it is a caller of its own.
    expect((await ask({ socketPath: stack.socket }, "GET", `/v1/responses/${id}`)).status).toBe(404);
  });
});

describe("the store's byte bound", () => {
  it("keeps about three entries of this size, and drops the least recently used first", async () => {
    const ids: string[] = [];
    for (const input of ["one", "two", "six"]) ids.push(((await create(KEY_A, input)).json() as { id: string }).id);
    // Reading the first makes the second the least recently used; a fourth then pushes it out.
    expect((await ask(tcp, "GET", `/v1/responses/${ids[0]}`, undefined, as(KEY_A))).status).toBe(200);
    ids.push(((await create(KEY_A, "ten")).json() as { id: string }).id);
    const statuses = [];
    for (const id of ids) statuses.push((await ask(tcp, "GET", `/v1/responses/${id}`, undefined, as(KEY_A))).status);
    expect(statuses).toEqual([200, 404, 200, 200]);
  });
});
