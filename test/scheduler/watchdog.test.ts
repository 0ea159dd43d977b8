import { afterEach, describe, expect, it } from "vitest";
import { Watchdog, type WatchLimits } from "../../src/scheduler/watchdog.ts";

// The watchdog's rules, on short real timers (the end-to-end test stops a real llama-server): what
// counts as a hang and what is only a busy runner. Outcomes are asserted after waits several times
// the limits, never times.

const LIMITS: WatchLimits = { healthTimeoutMs: 100, stallMs: 400, promptStallMs: 2_000 };
/** A chunk of a streamed answer's body: a token. */
const TOKEN = new TextEncoder().encode('data: {"choices":[]}\n\n');
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
const answers = async () => {};
const refuses = async () => {
  throw new Error("connect ECONNREFUSED");
};
/** A /health that never answers: it ends only when the watchdog's own deadline aborts it. */
const silent = (signal: AbortSignal) => new Promise((_, reject) => signal.addEventListener("abort", () => reject(signal.reason)));

const dogs: Watchdog[] = [];
function watch(probe: (signal: AbortSignal) => Promise<unknown>, limits = LIMITS) {
  const hung: string[] = [];
  const dog = new Watchdog(limits, probe, (why) => hung.push(why));
  dogs.push(dog);
  dog.start();
  return { dog, hung };
}
afterEach(() => dogs.splice(0).forEach((dog) => dog.stop()));

describe("the runner watchdog", () => {
  it("gives up on a runner whose /health does not answer in time, once", async () => {
    const { hung } = watch(silent);
    await sleep(600);
    expect(hung).toEqual(["its /health did not answer within 100 ms"]);
  });

  it("leaves alone a runner whose /health answers, or refuses (a process that is ending)", async () => {
    const answering = watch(answers);
    const refusing = watch(refuses);
    await sleep(600);
    expect([answering.hung, refusing.hung]).toEqual([[], []]);
  });

  it("gives up on a streaming runner that sends nothing past the stall limit", async () => {
    const { dog, hung } = watch(answers);
    const request = dog.track(true);
    request.heard(TOKEN);
    await sleep(1_200);
    expect(hung).toHaveLength(1);
    expect(hung[0]).toMatch(/^it sent nothing for \d+ ms during a generation$/);
  });

  it("takes a stream that keeps sending for alive, and SSE pings for silence", async () => {
    const { dog, hung } = watch(answers);
    const request = dog.track(true);
    request.heard(TOKEN);
    for (let i = 0; i < 12; i++) {
      await sleep(50);
      request.heard(new TextEncoder().encode('data: {"choices":[]}\n\n'));
    }
    expect(hung).toEqual([]);
    for (let i = 0; i < 24; i++) {
      await sleep(50);
      request.heard(new TextEncoder().encode(":\n\n"));
    }
    expect(hung).toHaveLength(1);
  });

  it("waits the prompt limit while a request has had no byte yet (a prompt being processed)", async () => {
    const { dog, hung } = watch(answers);
    const generating = dog.track(true);
    generating.heard(TOKEN);
    dog.track(true); // its prompt holds up every slot
    await sleep(1_200);
    expect(hung).toEqual([]);
    await sleep(2_000);
    expect(hung).toHaveLength(1);
    expect(hung[0]).toMatch(/while a prompt was processed$/);
  });

  it("takes a streamed answer's headers for life, not for its first token: its prompt gets the prompt limit", async () => {
    const { dog, hung } = watch(answers);
    const request = dog.track(true);
    request.heard(); // llama-server sends a stream's headers before it processes the prompt
    await sleep(1_200);
    expect(hung).toEqual([]);
    request.heard(TOKEN);
    await sleep(1_200);
    expect(hung).toHaveLength(1);
    expect(hung[0]).toMatch(/during a generation$/);
  });

  it("never judges whole answers by their silence, nor a runner whose requests ended", async () => {
    const { dog, hung } = watch(answers);
    dog.track(false);
    const ended = dog.track(true);
    ended.heard();
    ended.end();
    await sleep(2_500);
    expect(hung).toEqual([]);
  });
});
