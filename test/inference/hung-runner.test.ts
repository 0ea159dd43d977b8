import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ask, openStream } from "../support/http.ts";
import { until } from "../support/until.ts";
import { isAlive, startStack, type Stack } from "./harness.ts";
import { busySlots, runnerPid, runnerSocket } from "./runners.ts";

// A runner that stays alive but stops answering (SIGSTOP here; a driver hang or a swapped-out host
// in life) is noticed, killed and replaced: the requests on it end with a JSON error, and the model
// serves again from a fresh runner. The server under Bun, Node and Deno, real llama-server runners,
// the limits short so that each case takes seconds (the outcomes are asserted, never the times).

/** /health is what notices a stopped process: the stall limits are out of reach here. */
const HEALTH_WATCH = { INFERENCE_RUNNER_HEALTH_TIMEOUT_MS: "1500", INFERENCE_RUNNER_STALL_TIMEOUT_MS: "60000", INFERENCE_RUNNER_PROMPT_TIMEOUT_MS: "60000" };

// The three runtimes at once (each with its own server and runner), each one's cases in order: the
// cases wait seconds for the watch to notice, and one runtime after another took 50 s of a run.
describe.concurrent.each(["bun", "node", "deno"] as const)("a runner that stops answering, under %s", (runtime) => {
  describe("case after case", { concurrent: false }, () => {
    let stack: Stack;
    /** Every runner the tests stopped: killed at the end whatever happened, so none is left behind. */
    const stopped: number[] = [];

    beforeAll(async () => {
      stack = await startStack({ runtime, models: ["ai/tiny"], env: HEALTH_WATCH });
      // Context shift: a generation goes on past the context, for as long as the test needs.
      await ask({ url: stack.url }, "POST", "/engines/_configure", { model: "ai/tiny", "runtime-flags": ["--context-shift"] });
    });
    afterAll(async () => {
      for (const pid of stopped) if (isAlive(pid)) process.kill(pid, "SIGKILL");
      await stack?.stop();
    });

    const tcp = () => ({ url: stack.url });
    const COMPLETIONS = "/v1/completions";
    const chat = { model: "ai/tiny", messages: [{ role: "user", content: "hi" }], max_tokens: 4 };
    const endless = (stream: boolean) => ({ model: "ai/tiny", prompt: "x", max_tokens: 1_000_000, ignore_eos: true, stream });

    /** Stops the model's runner as a hang would, once it has the slot busy or idle as the test set it up. */
    async function hang(): Promise<number> {
      const pid = await runnerPid(stack, "ai/tiny");
      stopped.push(pid);
      process.kill(pid, "SIGSTOP");
      return pid;
    }

    /** The hung runner is gone (killed, not left stopped), and the model answers from a fresh one. */
    async function servesAgain(pid: number): Promise<void> {
      await until(() => !isAlive(pid), "the hung runner to be killed");
      const next = await ask(tcp(), "POST", "/v1/chat/completions", chat);
      expect(next.status).toBe(200);
      expect(await runnerPid(stack, "ai/tiny")).not.toBe(pid);
    }

    it("ends a whole answer in progress with 502 runner_unresponsive, and the model serves again", async () => {
      expect((await ask(tcp(), "POST", "/v1/chat/completions", chat)).status).toBe(200);
      const pending = ask(tcp(), "POST", COMPLETIONS, endless(false));
      const runner = await runnerSocket(stack, "ai/tiny");
      await until(async () => (await busySlots(runner)) === 1, "the generation to start");
      const pid = await hang();
      const answer = await pending;
      expect(answer.status).toBe(502);
      expect(answer.json().error).toMatchObject({ type: "upstream_error", code: "runner_unresponsive" });
      expect(answer.json().error.message).toMatch(/\/health did not answer within 1500 ms/);
      await servesAgain(pid);
    });

    it("ends an OpenAI stream with an SSE error event", async () => {
      const stream = openStream(tcp(), COMPLETIONS, endless(true), 3);
      await stream.started;
      const pid = await hang();
      const text = await stream.ended;
      expect(stream.status()).toBe(200);
      const last = text.trim().split("\n\n").at(-1)!;
      expect(JSON.parse(last.replace(/^data: /, "")).error).toMatchObject({ type: "upstream_error", code: "runner_unresponsive" });
      await servesAgain(pid);
    });

    it("ends an Ollama stream with Ollama's error line", async () => {
      const body = { model: "ai/tiny", messages: [{ role: "user", content: "x" }], options: { num_predict: 1_000_000 } };
      const stream = openStream(tcp(), "/api/chat", body, 0);
      await until(() => stream.text().split("\n").length > 3, "the first lines");
      const pid = await hang();
      const lines = (await stream.ended).trim().split("\n");
      expect(JSON.parse(lines.at(-1)!).error).toMatch(/stopped answering/);
      await servesAgain(pid);
    });

    it("is noticed while idle: the next request gets a fresh runner", async () => {
      expect((await ask(tcp(), "POST", "/v1/chat/completions", chat)).status).toBe(200);
      const pid = await hang();
      await servesAgain(pid);
      const metrics = (await ask(tcp(), "GET", "/metrics")).body;
      // Each runner killed here counts as a crash of the model's runner.
      expect(metrics).toMatch(/llamadock_runner_crashes_total\{model="[^"]*ai\/tiny:latest",mode="completion"\} 4\n/);
    });

    it("is noticed by the silence of a stream when /health is not asked in time", async () => {
      await stack.restart({ INFERENCE_RUNNER_HEALTH_TIMEOUT_MS: "60000", INFERENCE_RUNNER_STALL_TIMEOUT_MS: "1000", INFERENCE_RUNNER_PROMPT_TIMEOUT_MS: "60000" });
      // A whole generation streams to its end: a runner that sends is never taken for hung.
      const whole = await ask(tcp(), "POST", COMPLETIONS, { ...endless(true), max_tokens: 2000 });
      expect(whole.body.trim().endsWith("data: [DONE]")).toBe(true);
      const stream = openStream(tcp(), COMPLETIONS, endless(true), 3);
      await stream.started;
      const pid = await hang();
      const last = (await stream.ended).trim().split("\n\n").at(-1)!;
      const error = JSON.parse(last.replace(/^data: /, "")).error;
      expect(error).toMatchObject({ code: "runner_unresponsive" });
      expect(error.message).toMatch(/sent nothing for \d+ ms during a generation/);
      await servesAgain(pid);
    });
  });
});
