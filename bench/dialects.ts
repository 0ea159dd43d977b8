import { startStack } from "../test/inference/harness.ts";

// What a dialect costs on top of chat forwarding.
// 1. Throughput: the same tiny generation (max_tokens 1) asked as OpenAI chat, Anthropic Messages,
//    OpenAI Responses and Ollama chat, 16 at a time, through our TCP listener, rounds alternating
//    so drift hits all alike. Target: Messages and Responses each at least 0.97 of chat.
// 2. Ollama's translation per streamed chunk: the same streamed generation (seeded, so the same
//    tokens) on /api/chat and on /v1/chat/completions, one at a time, in pairs; the difference of
//    each pair over its chunk count. Target: median under 0.5 ms per chunk.
//
//   npm run bench:dialects     (BENCH_ROUNDS, BENCH_REQUESTS, BENCH_CONCURRENCY, BENCH_STREAMS tune it)

const rounds = Number(process.env.BENCH_ROUNDS ?? 3);
const requestsPerRound = Number(process.env.BENCH_REQUESTS ?? 400);
const CONCURRENCY = Number(process.env.BENCH_CONCURRENCY ?? 16);
const streamPairs = Number(process.env.BENCH_STREAMS ?? 60);
const STREAM_TOKENS = 128;

const stack = await startStack({ models: ["ai/tiny"], env: { INFERENCE_SLOTS: "4" } });
const messages = [{ role: "user", content: "hi" }];
const dialects: Record<string, { path: string; body: object }> = {
  chat: { path: "/v1/chat/completions", body: { model: "ai/tiny", messages, max_tokens: 1 } },
  messages: { path: "/v1/messages", body: { model: "ai/tiny", messages, max_tokens: 1 } },
  responses: { path: "/v1/responses", body: { model: "ai/tiny", input: "hi", max_output_tokens: 1, store: false } },
  ollama: { path: "/api/chat", body: { model: "ai/tiny", messages, stream: false, options: { num_predict: 1 } } },
};

/** One streamed answer, read to its end: seconds taken and pieces of text received. */
async function streamOnce(path: string, body: object): Promise<{ seconds: number; chunks: number }> {
  const began = performance.now();
  const response = await fetch(`${stack.url}${path}`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
  const text = await response.text();
  const seconds = (performance.now() - began) / 1000;
  const chunks = path === "/api/chat" ? text.split("\n").filter((l) => l.includes('"done":false')).length : text.split("\n\n").filter((e) => e.includes('"content":"')).length;
  return { seconds, chunks };
}

async function perChunkOverheadMs(): Promise<{ median: number; chunks: number }> {
  const sampled = { temperature: 1, seed: 2 }; // a seed whose answer runs long
  const chat = { model: "ai/tiny", messages, stream: true, max_tokens: STREAM_TOKENS, ...sampled };
  const ollama = { model: "ai/tiny", messages, stream: true, options: { num_predict: STREAM_TOKENS, ...sampled } };
  const diffs: number[] = [];
  let chunks = 0;
  for (let pair = 0; pair < streamPairs; pair++) {
    const order = pair % 2 ? ["ollama", "chat"] : ["chat", "ollama"];
    const took: Record<string, { seconds: number; chunks: number }> = {};
    for (const name of order) took[name] = name === "chat" ? await streamOnce("/v1/chat/completions", chat) : await streamOnce("/api/chat", ollama);
    chunks = took.chat!.chunks;
    if (took.ollama!.chunks !== chunks) throw new Error(`different answers: ${took.ollama!.chunks} vs ${chunks} chunks`);
    diffs.push(((took.ollama!.seconds - took.chat!.seconds) * 1000) / Math.max(chunks, 1));
  }
  diffs.sort((a, b) => a - b);
  return { median: diffs[Math.floor(diffs.length / 2)]!, chunks };
}

async function burst(name: string, count: number): Promise<number> {
  const { path, body } = dialects[name]!;
  const text = JSON.stringify(body);
  let next = 0;
  const began = performance.now();
  const worker = async () => {
    while (next++ < count) {
      const response = await fetch(`${stack.url}${path}`, { method: "POST", headers: { "content-type": "application/json" }, body: text });
      await response.arrayBuffer();
      if (response.status !== 200) throw new Error(`${name}: status ${response.status}`);
    }
  };
  await Promise.all(Array.from({ length: CONCURRENCY }, worker));
  return (performance.now() - began) / 1000;
}

try {
  const names = Object.keys(dialects);
  for (const name of names) await burst(name, 50); // load the runner and warm each path
  const seconds = new Map(names.map((n) => [n, 0]));
  for (let round = 0; round < rounds; round++) {
    for (const name of round % 2 ? [...names].reverse() : names) seconds.set(name, seconds.get(name)! + (await burst(name, requestsPerRound)));
  }
  const rate = (name: string) => (rounds * requestsPerRound) / seconds.get(name)!;
  console.log(`dialects (${rounds} x ${requestsPerRound} requests, ${CONCURRENCY} concurrent, 1 token)`);
  for (const name of names) console.log(`  ${name.padEnd(10)} ${rate(name).toFixed(0)} req/s`);
  for (let i = 0; i < 5; i++) await streamOnce("/api/chat", { model: "ai/tiny", messages, stream: true, options: { num_predict: 8 } });
  const { median, chunks } = await perChunkOverheadMs();
  console.log(`ollama stream (${streamPairs} pairs, ${chunks} chunks each): median ${median.toFixed(3)} ms per chunk over chat (target < 0.5)`);
  console.log(`  ratio messages/chat: ${(rate("messages") / rate("chat")).toFixed(3)}; responses/chat: ${(rate("responses") / rate("chat")).toFixed(3)} (target >= 0.97); ollama/chat: ${(rate("ollama") / rate("chat")).toFixed(3)}`);
} finally {
  await stack.stop();
}
