import { describe, expect, it } from "vitest";
import { LightHeaders } from "../../src/runtime/node-headers.ts";

// The light Headers against the native class: the same answers to the same calls.

const NativeHeaders = globalThis.Headers;
const both = (init?: HeadersInit) => [new LightHeaders(init) as unknown as Headers, new NativeHeaders(init)] as const;
const seen = (headers: Headers) => ({
  entries: [...headers],
  keys: [...headers.keys()],
  values: [...headers.values()],
  each: (() => {
    const out: string[] = [];
    headers.forEach((value, name) => out.push(`${name}=${value}`));
    return out;
  })(),
  cookies: headers.getSetCookie(),
});

describe("LightHeaders", () => {
  it("is built from pairs, a record or another Headers, as the native one", () => {
    const inits: HeadersInit[] = [
      [["Content-Type", "application/json"], ["X-A", " 1 "], ["x-a", "2"]],
      { "Content-Type": "text/plain", Accept: "*/*" },
      new NativeHeaders({ b: "2", a: "1" }),
      new LightHeaders([["b", "2"], ["a", "1"]]) as unknown as Headers,
      new LightHeaders([["set-cookie", "x=1"], ["Vary", "Origin"], ["a", "1"], ["Set-Cookie", "y=2"], ["vary", "Accept"]]) as unknown as Headers,
    ];
    for (const init of inits) {
      const [light, native] = both(init);
      expect(seen(light)).toEqual(seen(native));
    }
  });

  it("gets, sets, appends and deletes as the native one, names in any case", () => {
    const [light, native] = both([["set-cookie", "a=1"], ["Vary", "Origin"]]);
    for (const headers of [light, native]) {
      headers.append("Set-Cookie", "b=2");
      headers.append("vary", "Accept");
      headers.set("X-Overhead", "0.42");
      headers.set("x-overhead", "0.43");
      headers.append("x-gone", "1");
      headers.delete("X-GONE");
    }
    expect(seen(light)).toEqual(seen(native));
    // Names dropped from the middle, more than one entry each, the others kept in their order.
    for (const headers of [light, native]) {
      headers.append("x-twice", "1");
      headers.append("x-kept", "a");
      headers.append("x-twice", "2");
      headers.append("x-kept", "b");
      headers.delete("x-twice");
      headers.append("x-set", "1");
      headers.append("x-last", "z");
      headers.append("x-set", "2");
      headers.set("x-set", "3");
    }
    expect(seen(light)).toEqual(seen(native));
    for (const name of ["vary", "VARY", "set-cookie", "x-overhead", "x-gone", "x-twice", "x-kept", "x-set", "x-last", "missing"]) {
      expect(light.get(name)).toBe(native.get(name));
      expect(light.has(name)).toBe(native.has(name));
    }
  });

  it("answers a name or value met many times as it did the first time", () => {
    // Past the bound on the names it keeps checked, so that the kept ones are dropped once.
    const names = Array.from({ length: 1500 }, (_, i) => `X-Name-${i}`);
    const [light, native] = both();
    for (const round of [0, 1]) {
      for (const name of names) {
        light.append(name, ` ${round}\t`);
        native.append(name, ` ${round}\t`);
      }
    }
    for (const name of [names[0]!, names[700]!.toUpperCase(), names[1499]!.toLowerCase()]) expect(light.get(name)).toBe(native.get(name));
    expect(seen(light)).toEqual(seen(native));
    for (const value of ["\r\n v \n", "\tv", "v ", " ", ""]) {
      light.set("x-edges", value);
      native.set("x-edges", value);
      expect(light.get("X-Edges")).toBe(native.get("X-Edges"));
    }
    // A name kept as checked is still refused in another form that is not a token.
    expect(() => light.get(`${names[1]} `)).toThrow(TypeError);
  });

  it("refuses what the native one refuses", () => {
    const [light, native] = both();
    for (const [name, value] of [["bad name", "v"], ["x", "a\r\nb"], ["", "v"], ["x", "a\0b"]] as const) {
      expect(() => native.append(name, value)).toThrow(TypeError);
      expect(() => light.append(name, value)).toThrow(TypeError);
      expect(() => light.set(name, value)).toThrow(TypeError);
    }
    expect(() => new LightHeaders([["only-a-name"]] as unknown as HeadersInit)).toThrow(TypeError);
    expect(() => light.get("bad name")).toThrow(TypeError);
  });

  it("is a Headers to instanceof, and the native class takes it as an init", () => {
    const light = new LightHeaders({ "content-type": "text/plain", "x-a": "1" }) as unknown as Headers;
    expect(light instanceof LightHeaders).toBe(true);
    expect(new NativeHeaders() instanceof LightHeaders).toBe(true);
    expect(Object.prototype.toString.call(light)).toBe("[object Headers]");
    const response = new Response("hi", { headers: light });
    expect(response.headers.get("x-a")).toBe("1");
    expect([...new NativeHeaders(light)]).toEqual([...light]);
  });

  it("copies a light one apart from it, and lists its pairs for the wire as they were added", () => {
    const original = new LightHeaders([["Vary", "Origin"], ["set-cookie", "a=1"], ["vary", "Accept"]]);
    const copy = new LightHeaders(original as unknown as Headers);
    copy.delete("vary");
    expect(original.get("vary")).toBe("Origin, Accept");
    expect(LightHeaders.flatList(original as unknown as Headers)).toEqual(["vary", "Origin", "set-cookie", "a=1", "vary", "Accept"]);
    expect(LightHeaders.flatList(copy as unknown as Headers)).toEqual(["set-cookie", "a=1"]);
    expect(LightHeaders.flatList(new NativeHeaders([["b", "2"], ["a", "1"], ["a", "3"]]))).toEqual(["a", "1, 3", "b", "2"]);
  });
});
