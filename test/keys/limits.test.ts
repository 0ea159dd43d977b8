import { describe, expect, it } from "vitest";
import { createLimiter, duration } from "../../src/keys/limits.ts";
import { HttpError } from "../../src/http/errors.ts";
import type { Caller } from "../../src/keys/keyring.ts";

// Each key's limits over a sliding minute, on a clock the test moves.

const caller = (limits: Partial<Caller["limits"]>): Caller => ({ name: "k", admin: false, limits: { inFlight: 0, requestsPerMinute: 0, tokensPerMinute: 0, ...limits } });
const refusal = (run: () => unknown): HttpError => {
  try {
    run();
  } catch (error) {
    return error as HttpError;
  }
  throw new Error("not refused");
};

describe("limits", () => {
  it("requests per minute: the third of two is refused until the first is a minute old", () => {
    let now = 0;
    const limiter = createLimiter(() => now);
    const bob = caller({ requestsPerMinute: 2 });
    limiter.admit(bob).done(0);
    now = 20_000;
    expect(limiter.admit(bob).headers).toMatchObject({ "x-ratelimit-remaining-requests": "0", "x-ratelimit-limit-requests": "2" });
    const refused = refusal(() => limiter.admit(bob));
    expect([refused.status, refused.code, refused.headers["retry-after"]]).toEqual([429, "rate_limit_exceeded", "40"]);
    now = 60_000;
    expect(limiter.admit(bob).headers["x-ratelimit-remaining-requests"]).toBe("0");
    expect(limiter.refusals().get("k")?.get("requests_per_minute")).toBe(1);
  });

  it("tokens per minute: counted as answers end; refused once the minute holds the limit", () => {
    let now = 0;
    const limiter = createLimiter(() => now);
    const carol = caller({ tokensPerMinute: 100 });
    limiter.admit(carol).done(60);
    now = 10_000;
    limiter.admit(carol).done(60);
    const refused = refusal(() => limiter.admit(carol));
    expect(refused.headers).toMatchObject({ "x-ratelimit-remaining-tokens": "0", "retry-after": "50" });
    now = 60_001; // the first 60 aged out: 60 of 100 used
    expect(limiter.admit(carol).headers["x-ratelimit-remaining-tokens"]).toBe("40");
  });

  it("in flight: held from admission to the end, once", () => {
    const limiter = createLimiter(() => 0);
    const dave = caller({ inFlight: 1 });
    const first = limiter.admit(dave);
    expect(refusal(() => limiter.admit(dave)).message).toContain("in flight");
    first.done(0);
    first.done(0); // a second end changes nothing
    const second = limiter.admit(dave);
    expect(refusal(() => limiter.admit(dave)).status).toBe(429);
    second.done(0);
  });

  it("a key without limits is never refused and gets no headers", () => {
    const limiter = createLimiter();
    for (let i = 0; i < 1000; i++) expect(limiter.admit(caller({})).headers).toEqual({});
  });

  it.each([
    [0, "0ms"],
    [120, "120ms"],
    [1000, "1s"],
    [1001, "2s"],
    [59_500, "1m0s"],
    [60_000, "1m0s"],
    [125_000, "2m5s"],
  ])("%i ms is written %s", (ms, text) => expect(duration(ms)).toBe(text));
});
