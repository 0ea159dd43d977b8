import { readFile, writeFile } from "node:fs/promises";
import { join } from "node:path";
import OpenAI, { toFile } from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ask } from "../support/http.ts";
import { NO_EARLY_STOP, startStack, type Stack } from "../inference/harness.ts";

// OpenAI's Files and Batch API through the official client (openai): upload, create, poll,
// download, cancel, a restart and a crash in the middle of a batch, a key's bound on batches, the
// room a batch waiting its turn holds on its file quota, against the server as users run it with
// real runners. Lines run as their owner's requests (counted in its usage), in the batch lane.
// (The engine's ordering and disk cases: engine.test.ts; a key's other bounds: limits.test.ts.)

const KEYS = { batcher: "sk-batcher-61f0d2", other: "sk-other-0a77c9", holder: "sk-holder-3e95b1" };
/** A batch runs this many lines at once (src/batches/batches.ts). */
const LINES_AT_ONCE = 2;
const PER_KEY = 3;
let settings: Record<string, string>;

let stack: Stack;
const client = (key = KEYS.batcher) => new OpenAI({ baseURL: `${stack.url}/v1`, apiKey: key, maxRetries: 0 });

beforeAll(async () => {
  stack = await startStack({ models: ["ai/tiny"], embedders: ["ai/embed"] });
  await writeFile(join(stack.dir, "keys"), `${KEYS.batcher} name=batcher\n${KEYS.other} name=other\n${KEYS.holder} name=holder\n`);
  settings = { API_KEYS_FILE: join(stack.dir, "keys"), INFERENCE_SLOTS: "2", BATCHES_PER_KEY: String(PER_KEY) };
  await stack.restart(settings);
}, 180_000);
afterAll(async () => {
  await stack?.stop();
});

type Line = { custom_id: string; method: "POST"; url: string; body: object };
const chatLine = (id: string, tokens = 8, model = "ai/tiny"): Line => ({
  custom_id: id,
  method: "POST",
  url: "/v1/chat/completions",
  body: { model, messages: [{ role: "user", content: `hello ${id}` }], max_tokens: tokens, ...NO_EARLY_STOP },
});
const jsonl = (lines: object[]) => lines.map((l) => JSON.stringify(l)).join("\n") + "\n";

async function submit(lines: Line[], endpoint: "/v1/chat/completions" | "/v1/completions" | "/v1/embeddings" = "/v1/chat/completions", key = KEYS.batcher) {
  const file = await client(key).files.create({ file: await toFile(Buffer.from(jsonl(lines)), "batch.jsonl"), purpose: "batch" });
  expect(file).toMatchObject({ object: "file", purpose: "batch", filename: "batch.jsonl" });
  return client(key).batches.create({ input_file_id: file.id, endpoint, completion_window: "24h" });
}

/** Polls the batch (every 100 ms, bounded) until `done` holds. */
async function poll(id: string, done: (b: OpenAI.Batch) => boolean, what: string, key = KEYS.batcher): Promise<OpenAI.Batch> {
  for (let i = 0; i < 1200; i++) {
    const batch = await client(key).batches.retrieve(id).catch((error: Error) => (error.message.includes("ECONNREFUSED") ? undefined : Promise.reject(error)));
    if (batch && done(batch)) return batch;
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  throw new Error(`batch ${id}: no ${what} within the bound`);
}
const finished = (b: OpenAI.Batch) => ["completed", "failed", "cancelled", "expired"].includes(b.status);

type Result = { custom_id: string; response: { status_code: number; body: any } | null; error: unknown };
const results = async (fileId: string | null | undefined): Promise<Result[]> =>
  fileId ? (await (await client().files.content(fileId)).text()).split("\n").filter(Boolean).map((l) => JSON.parse(l) as Result) : [];

const usageOf = async (model: string) => {
  const answer = await ask({ url: stack.url }, "GET", `/engines/usage?model=${encodeURIComponent(model)}&by=key`, undefined, { authorization: `Bearer ${KEYS.batcher}` });
  return (answer.json() as { total: { requests: number; errors: number; completion_tokens: number } }).total;
};

describe("batches through the openai client", () => {
  it("upload, create, poll, download: each line's answer once, a failed line in the error file, counted in usage", async () => {
    const before = await usageOf("ai/tiny:latest");
    const lines = [chatLine("a"), chatLine("b"), chatLine("c"), chatLine("d"), chatLine("missing", 8, "ai/missing")];
    const created = await submit(lines);
    expect(["validating", "in_progress"]).toContain(created.status);
    const batch = await poll(created.id, finished, "end");
    expect(batch.status).toBe("completed");
    expect(batch.request_counts).toEqual({ total: 5, completed: 4, failed: 1 });
    const output = await results(batch.output_file_id);
    expect(output.map((r) => r.custom_id).sort()).toEqual(["a", "b", "c", "d"]);
    for (const r of output) {
      expect(r.response?.status_code).toBe(200);
      expect(r.response?.body.usage.completion_tokens).toBe(8);
    }
    const errors = await results(batch.error_file_id);
    expect(errors.map((r) => [r.custom_id, r.response?.status_code, r.response?.body.error.code])).toEqual([["missing", 404, "model_not_found"]]);
    const after = await usageOf("ai/tiny:latest");
    expect([after.requests - before.requests, after.completion_tokens - before.completion_tokens]).toEqual([4, 32]);
    // Another key's: as if it did not exist.
    await expect(client(KEYS.other).batches.retrieve(batch.id)).rejects.toMatchObject({ status: 404 });
    await expect(client(KEYS.other).files.content(batch.output_file_id!)).rejects.toMatchObject({ status: 404 });
    expect((await client().batches.list()).data.map((b) => b.id)).toContain(batch.id);
  });

  it("completions and embeddings lines", async () => {
    const completions = await submit([{ custom_id: "p", method: "POST", url: "/v1/completions", body: { model: "ai/tiny", prompt: "once", max_tokens: 4, ...NO_EARLY_STOP } }], "/v1/completions");
    const embeddings = await submit([{ custom_id: "e", method: "POST", url: "/v1/embeddings", body: { model: "ai/embed", input: "hello" } }], "/v1/embeddings");
    const [c, e] = await Promise.all([poll(completions.id, finished, "end"), poll(embeddings.id, finished, "end")]);
    expect((await results(c.output_file_id))[0]?.response?.body.object).toBe("text_completion");
    expect((await results(e.output_file_id))[0]?.response?.body.data[0].embedding.length).toBeGreaterThan(0);
  });

  it("a file whose lines are wrong fails the batch with OpenAI's errors", async () => {
    const file = await client().files.create({ file: await toFile(Buffer.from('{"custom_id":"x","method":"GET","url":"/v1/chat/completions","body":{}}\nnot json\n'), "bad.jsonl"), purpose: "batch" });
    const created = await client().batches.create({ input_file_id: file.id, endpoint: "/v1/chat/completions", completion_window: "24h" });
    const batch = await poll(created.id, finished, "end");
    expect(batch.status).toBe("failed");
    expect(batch.errors?.data?.map((e) => [e.line, e.code])).toEqual([[1, "invalid_request"], [2, "invalid_json_line"]]);
  });

  it("cancel: the lines running finish, no other starts, and the batch ends cancelled with what it has", async () => {
    const before = await usageOf("ai/tiny:latest");
    const lines = Array.from({ length: 40 }, (_, i) => chatLine(`c${i}`, 64));
    const created = await submit(lines);
    await poll(created.id, (b) => (b.request_counts?.completed ?? 0) >= 1, "first line");
    const cancelling = await client().batches.cancel(created.id);
    expect(["cancelling", "cancelled"]).toContain(cancelling.status);
    const batch = await poll(created.id, finished, "end");
    expect(batch.status).toBe("cancelled");
    // Past the lines ended when the cancel came, only those then running (at most two) end.
    const atCancel = cancelling.request_counts!.completed;
    const done = batch.request_counts!.completed;
    expect(done).toBeGreaterThanOrEqual(atCancel);
    expect(done).toBeLessThanOrEqual(atCancel + LINES_AT_ONCE);
    expect(batch.request_counts!.failed).toBe(0);
    expect((await results(batch.output_file_id)).length).toBe(done);
    // Each line started ran to its end, and no line started without its result written: as many
    // requests as results, none cut short (an error), each its 64 tokens.
    const after = await usageOf("ai/tiny:latest");
    expect([after.requests - before.requests, after.errors - before.errors, after.completion_tokens - before.completion_tokens]).toEqual([done, 0, done * 64]);
  });

  it("deleting a file a batch still reads as its input: 409 file_in_use naming the batch; once the batch has ended, deleted", async () => {
    const created = await submit(Array.from({ length: 40 }, (_, i) => chatLine(`d${i}`, 64)));
    const refused = await client().files.delete(created.input_file_id).catch((error: unknown) => error);
    expect(refused).toBeInstanceOf(OpenAI.ConflictError);
    const { status, code, message } = refused as InstanceType<typeof OpenAI.APIError>;
    expect([status, code]).toEqual([409, "file_in_use"]);
    expect(message).toContain(created.id);
    expect((await client().files.retrieve(created.input_file_id)).id).toBe(created.input_file_id);
    await client().batches.cancel(created.id);
    const ended = await poll(created.id, finished, "end");
    expect(ended.status).toBe("cancelled");
    expect(await client().files.delete(created.input_file_id)).toMatchObject({ id: created.input_file_id, deleted: true });
  });

  it("a restart in the middle: the batch resumes where it stopped, no line run twice", async () => {
    const before = await usageOf("ai/tiny:latest");
    const lines = Array.from({ length: 16 }, (_, i) => chatLine(`r${i}`, 64));
    const created = await submit(lines);
    const midway = await poll(created.id, (b) => (b.request_counts?.completed ?? 0) >= 2, "two lines");
    expect(midway.request_counts!.completed).toBeLessThan(16);
    await stack.restart(settings);
    const batch = await poll(created.id, finished, "end");
    expect(batch.status).toBe("completed");
    expect(batch.request_counts).toEqual({ total: 16, completed: 16, failed: 0 });
    const ids = (await results(batch.output_file_id)).map((r) => r.custom_id);
    expect(ids.sort()).toEqual(lines.map((l) => l.custom_id).sort());
    // Each line ran once: 16 requests, none cut short (an error), 64 tokens each.
    const after = await usageOf("ai/tiny:latest");
    expect([after.requests - before.requests, after.errors - before.errors, after.completion_tokens - before.completion_tokens]).toEqual([16, 0, 16 * 64]);
  });

  it("a server killed in the middle (SIGKILL): the next start runs only the lines without a result, each result once", async () => {
    const lines = Array.from({ length: 16 }, (_, i) => chatLine(`k${i}`, 64));
    const created = await submit(lines);
    await poll(created.id, (b) => (b.request_counts?.completed ?? 0) >= 3, "three lines");
    stack.server.child.kill("SIGKILL");
    await stack.server.exited;
    // The results on disk when it died (a last line cut short is not one): each keeps its request id.
    const onDisk = (await readFile(join(stack.dir, "batches", "batches", `${created.id}.output.jsonl`), "utf8")).split("\n").slice(0, -1).map((l) => JSON.parse(l) as Result & { id: string });
    expect(onDisk.length).toBeGreaterThanOrEqual(3);
    expect(onDisk.length).toBeLessThan(16);
    await stack.restart(settings);
    const batch = await poll(created.id, finished, "end");
    expect(batch.status).toBe("completed");
    expect(batch.request_counts).toEqual({ total: 16, completed: 16, failed: 0 });
    const output = (await results(batch.output_file_id)) as (Result & { id: string })[];
    expect(output.map((r) => r.custom_id).sort()).toEqual(lines.map((l) => l.custom_id).sort());
    // The lines with a result were not run again: theirs is the same request, not a second one.
    const byLine = new Map(output.map((r) => [r.custom_id, r.id]));
    expect(onDisk.map((r) => byLine.get(r.custom_id))).toEqual(onDisk.map((r) => r.id));
  });

  it("under a running batch, an interactive request of the same key is served first: its first token within 2x of alone", async () => {
    const median = (values: number[]) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)]!;
    const interactive = async () => {
      const times = { firstToken: [] as number[], total: [] as number[] };
      for (let i = 0; i < 7; i++) {
        const began = performance.now();
        const stream = await client().chat.completions.create({ ...chatLine("i", 64).body, stream: true } as OpenAI.ChatCompletionCreateParamsStreaming);
        let first = 0;
        for await (const chunk of stream) if (!first && chunk.choices[0]?.delta?.content) first = performance.now() - began;
        times.firstToken.push(first);
        times.total.push(performance.now() - began);
      }
      return { firstToken: median(times.firstToken), total: median(times.total) };
    };
    const alone = await interactive();
    const created = await submit(Array.from({ length: 200 }, (_, i) => chatLine(`l${i}`, 64)));
    const started = await poll(created.id, (b) => (b.request_counts?.completed ?? 0) >= 2, "the batch under way");
    const underBatch = await interactive();
    const during = (await client().batches.retrieve(created.id)).request_counts!.completed - started.request_counts!.completed;
    await client().batches.cancel(created.id);
    await poll(created.id, finished, "end");
    const figures = { aloneMs: alone, underBatchMs: underBatch, firstTokenRatio: +(underBatch.firstToken / alone.firstToken).toFixed(2), totalRatio: +(underBatch.total / alone.total).toFixed(2), batchLinesMeanwhile: during };
    console.log(`batch under load: ${JSON.stringify(figures)}`);
    expect(during).toBeGreaterThan(0); // the batch ran meanwhile
    expect(figures.firstTokenRatio).toBeLessThan(2);
  });

  // Last: another key's lines make the runners share their slots between keys for 10 s after
  // (docs/sharing.md#fair-queueing), which the timing just above must not run under.
  it(`a key with ${PER_KEY} batches not yet ended gets 429 quota_exceeded for one more, in OpenAI's shape; another key does not`, async () => {
    const long = (tag: string) => Array.from({ length: 200 }, (_, i) => chatLine(`${tag}${i}`, 64));
    const open = [];
    for (let i = 0; i < PER_KEY; i++) open.push(await submit(long(`q${i}-`), "/v1/chat/completions", KEYS.other));
    const file = await client(KEYS.other).files.create({ file: await toFile(Buffer.from(jsonl(long("q"))), "batch.jsonl"), purpose: "batch" });
    const refused = await ask({ url: stack.url }, "POST", "/v1/batches", { input_file_id: file.id, endpoint: "/v1/chat/completions", completion_window: "24h" }, { authorization: `Bearer ${KEYS.other}` });
    expect(refused.status).toBe(429);
    expect(refused.json()).toEqual({ error: { message: expect.stringContaining("BATCHES_PER_KEY"), type: "rate_limit_error", code: "quota_exceeded" } });
    expect(refused.headers["x-should-retry"]).toBe("false");
    await expect(client(KEYS.other).batches.create({ input_file_id: file.id, endpoint: "/v1/chat/completions", completion_window: "24h" })).rejects.toMatchObject({ status: 429, code: "quota_exceeded" });
    // Another key's bound is its own (its batch waits for a turn: cancelled, it ends at once).
    const mine = await submit([chatLine("own")]);
    await client().batches.cancel(mine.id);
    expect((await poll(mine.id, finished, "end")).status).toBe("cancelled");
    // One ended frees a place.
    await client(KEYS.other).batches.cancel(open[0]!.id);
    await poll(open[0]!.id, finished, "end", KEYS.other);
    open.push(await client(KEYS.other).batches.create({ input_file_id: file.id, endpoint: "/v1/chat/completions", completion_window: "24h" }));
    for (const b of open) await client(KEYS.other).batches.cancel(b.id).catch(() => undefined);
    for (const b of open) expect(finished(await poll(b.id, finished, "end", KEYS.other))).toBe(true);
  });

  it("a batch waiting its turn holds its room on its key's file quota: another batch, or an upload, that would fit without it is refused; cancelled, room again", async () => {
    // One batch at a time, and a quota that holds the input twice but not three times.
    await stack.restart({ ...settings, BATCHES_RUNNING: "1", KEY_MAX_FILE_BYTES: "2MiB" });
    const blocker = await submit(Array.from({ length: 200 }, (_, i) => chatLine(`b${i}`, 64)), "/v1/chat/completions", KEYS.other);
    await poll(blocker.id, (b) => (b.request_counts?.completed ?? 0) >= 1, "the other key's batch running", KEYS.other);
    // 900 KiB of input: its lines never run (the batch is cancelled while it waits its turn).
    const big = Array.from({ length: 100 }, (_, i) => ({ ...chatLine(`w${i}`), body: { ...chatLine(`w${i}`).body, messages: [{ role: "user", content: "w".repeat(9 * 1024) }] } }));
    const input = await client(KEYS.holder).files.create({ file: await toFile(Buffer.from(jsonl(big)), "big.jsonl"), purpose: "batch" });
    expect(input.bytes).toBeGreaterThan(2 * 1024 * 1024 - 2 * input.bytes); // a third would not fit
    const waiting = await client(KEYS.holder).batches.create({ input_file_id: input.id, endpoint: "/v1/chat/completions", completion_window: "24h" });
    const second = await client(KEYS.holder).batches.create({ input_file_id: input.id, endpoint: "/v1/chat/completions", completion_window: "24h" }).catch((error: unknown) => error);
    expect(second).toMatchObject({ status: 429, code: "quota_exceeded", message: expect.stringContaining("KEY_MAX_FILE_BYTES") });
    const upload = async () => client(KEYS.holder).files.create({ file: await toFile(Buffer.alloc(400 * 1024, "{}\n"), "more.jsonl"), purpose: "batch" });
    await expect(upload()).rejects.toMatchObject({ status: 429, code: "quota_exceeded" });
    expect((await client(KEYS.holder).batches.retrieve(waiting.id)).status).toBe("validating"); // it was waiting all along
    await client(KEYS.holder).batches.cancel(waiting.id);
    expect((await poll(waiting.id, finished, "end", KEYS.holder)).status).toBe("cancelled");
    expect((await upload()).bytes).toBe(400 * 1024);
    await client(KEYS.other).batches.cancel(blocker.id);
    await poll(blocker.id, finished, "end", KEYS.other);
  });
});
