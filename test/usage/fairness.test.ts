import { writeFile } from "node:fs/promises";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ask, type Target } from "../support/http.ts";
import { NO_EARLY_STOP, startStack, type Stack } from "../inference/harness.ts";
import { until } from "../support/until.ts";

// Two clients share one runner (2 slots): one floods it (16 requests always in flight), the other
// sends one streamed request at a time. Its latency under the flood over its latency alone, both
// measured in the same run, in turns: time to the first token within 2x when the two use their
// own keys (the fair queue serves them in turn, and keeps a slot for the calm key). The same
// client then sends with the flood's key: its requests queue behind the flood's, which is what
// the fair queue spares it (and shows that this measure tells the two apart).
//
// The whole answer's time is shown, not held to 2x: once it has its slot, the calm request shares
// the runner's compute with the flood's (llama-server steps every slot together; here one thread
// on a busy 2-core machine), so it takes up to about twice as long whatever the queue does.

const KEYS = { flood: "sk-flood-5d0c7e", calm: "sk-calm-a913f2" };
const FLOOD = 16;
const SAMPLES = 5;
const ROUNDS = 4;
/** A request of either client: the same generation for both. */
const body = (tokens: number) => ({ model: "ai/tiny", messages: [{ role: "user", content: "tell me a story" }], max_tokens: tokens, ...NO_EARLY_STOP });
const CALM_TOKENS = 200;
const FLOOD_TOKENS = 200;

let stack: Stack;
let tcp: Target;

beforeAll(async () => {
  stack = await startStack({ models: ["ai/tiny"] });
  await writeFile(join(stack.dir, "keys"), `${KEYS.flood} name=flood\n${KEYS.calm} name=calm\n`);
  await stack.restart({ API_KEYS_FILE: join(stack.dir, "keys"), INFERENCE_SLOTS: "2" });
  tcp = { url: stack.url };
}, 180_000);
afterAll(async () => {
  await stack?.stop();
});

const send = async (key: string, tokens = CALM_TOKENS) => {
  const answer = await ask(tcp, "POST", "/v1/chat/completions", body(tokens), { authorization: `Bearer ${key}` });
  expect(answer.status, answer.body).toBe(200);
};

const median = (values: number[]) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)]!;

type Timed = { firstTokenMs: number; totalMs: number };

/** `SAMPLES` streamed requests sent one after the other: each one's time to its first token and to its end, in ms. */
async function latencies(key: string): Promise<Timed[]> {
  const times: Timed[] = [];
  for (let i = 0; i < SAMPLES; i++) {
    const began = performance.now();
    const response = await fetch(`${stack.url}/v1/chat/completions`, {
      method: "POST",
      headers: { "content-type": "application/json", authorization: `Bearer ${key}` },
      body: JSON.stringify({ ...body(CALM_TOKENS), stream: true }),
    });
    expect(response.status).toBe(200);
    let firstTokenMs = 0;
    let text = "";
    const decoder = new TextDecoder();
    for await (const chunk of response.body as unknown as AsyncIterable<Uint8Array>) {
      text += decoder.decode(chunk, { stream: true });
      if (!firstTokenMs && text.includes('"content":"')) firstTokenMs = performance.now() - began;
    }
    expect(text).toContain("[DONE]");
    times.push({ firstTokenMs, totalMs: performance.now() - began });
  }
  return times;
}

/** Keeps FLOOD requests of the flood key in flight until `stop`; resolves once its queue is full. */
async function flood(): Promise<{ stop(): Promise<number> }> {
  let stopping = false;
  let sent = 0;
  const worker = async () => {
    while (!stopping) {
      await send(KEYS.flood, FLOOD_TOKENS);
      sent++;
    }
  };
  const workers = Array.from({ length: FLOOD }, worker);
  const queued = async () => {
    const runners = (await ask(tcp, "GET", "/engines/ps", undefined, { authorization: `Bearer ${KEYS.flood}` })).json() as { waiting: number }[];
    return (runners[0]?.waiting ?? 0) >= FLOOD - 4;
  };
  await until(queued, "the flood to fill the queue");
  return {
    async stop() {
      stopping = true;
      await Promise.all(workers);
      return sent;
    },
  };
}

describe("fair queueing across keys", () => {
  it("one key's flood: the other key's first token comes within 2x of alone; with the flood's key it does not", async () => {
    await send(KEYS.calm); // the runner loaded
    // Alone and under the flood in turns, so that the machine's own ups and downs fall on both.
    const alone: Timed[] = [];
    const ownKey: Timed[] = [];
    let floodKey: Timed[] = [];
    let floodServed = 0;
    for (let round = 0; round < ROUNDS; round++) {
      alone.push(...(await latencies(KEYS.calm)));
      const flooding = await flood();
      ownKey.push(...(await latencies(KEYS.calm)));
      if (round === 0) floodKey = await latencies(KEYS.flood);
      floodServed += await flooding.stop();
    }
    const of = (times: Timed[], field: keyof Timed) => median(times.map((t) => t[field]));
    const ratio = (field: keyof Timed, times: Timed[]) => +(of(times, field) / of(alone, field)).toFixed(2);
    const figures = {
      aloneMs: { firstToken: Math.round(of(alone, "firstTokenMs")), total: Math.round(of(alone, "totalMs")) },
      ownKeyMs: { firstToken: Math.round(of(ownKey, "firstTokenMs")), total: Math.round(of(ownKey, "totalMs")) },
      floodKeyMs: { firstToken: Math.round(of(floodKey, "firstTokenMs")), total: Math.round(of(floodKey, "totalMs")) },
      ownKeyRatio: { firstToken: ratio("firstTokenMs", ownKey), total: ratio("totalMs", ownKey) },
      floodKeyRatio: { firstToken: ratio("firstTokenMs", floodKey), total: ratio("totalMs", floodKey) },
      samples: alone.length,
      floodServed,
    };
    console.log(`fairness: ${JSON.stringify(figures)}`);
    expect(figures.ownKeyRatio.firstToken).toBeLessThan(2);
    expect(figures.floodKeyRatio.firstToken).toBeGreaterThan(10 * figures.ownKeyRatio.firstToken);
    expect(figures.floodKeyRatio.total).toBeGreaterThan(2 * figures.ownKeyRatio.total);
  }, 400_000);
});
