import { startStack } from "../test/inference/harness.ts";

// What a dialect costs on top of chat forwarding: the same tiny generation (max_tokens 1) asked
// as OpenAI chat, as Anthropic Messages and as OpenAI Responses, 16 at a time, through our TCP
// listener, rounds alternating so drift hits all alike. Target: each at least 0.97 of chat.
//
//   npm run bench:dialects     (BENCH_ROUNDS, BENCH_REQUESTS, BENCH_CONCURRENCY tune it)

const rounds = Number(process.env.BENCH_ROUNDS ?? 3);
const requestsPerRound = Number(process.env.BENCH_REQUESTS ?? 400);
const CONCURRENCY = Number(process.env.BENCH_CONCURRENCY ?? 16);

const stack = await startStack({ models: ["ai/tiny"], env: { INFERENCE_SLOTS: "4" } });
const messages = [{ role: "user", content: "hi" }];
const dialects: Record<string, { path: string; body: object }> = {
  chat: { path: "/v1/chat/completions", body: { model: "ai/tiny", messages, max_tokens: 1 } },
  messages: { path: "/v1/messages", body: { model: "ai/tiny", messages, max_tokens: 1 } },
  responses: { path: "/v1/responses", body: { model: "ai/tiny", input: "hi", max_output_tokens: 1, store: false } },
};

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
  console.log(`  ratio messages/chat: ${(rate("messages") / rate("chat")).toFixed(3)}; responses/chat: ${(rate("responses") / rate("chat")).toFixed(3)} (target >= 0.97)`);
} finally {
  await stack.stop();
}
