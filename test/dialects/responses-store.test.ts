import { describe, expect, it } from "vitest";
import { createResponseStore } from "../../src/dialects/responses.ts";
import { callerScope } from "../../src/http/guard.ts";

// The store of Responses kept for previous_response_id: bounded by count, bytes and age, the least
// recently used dropped first, and each response found only by the caller that made it.

const kept = (id: string) => ({ response: { id }, input: [] });
const ids = (store: ReturnType<typeof createResponseStore>, scope: string, names: string[]) =>
  names.filter((id) => store.get(scope, id) !== undefined);

describe("the response store", () => {
  it("forgets the least recently used past its count, and any past its age", () => {
    let now = 0;
    const store = createResponseStore({ maxEntries: 2, maxBytes: 1000, maxAgeMs: 1000 }, () => now);
    for (const id of ["a", "b", "c"]) store.put("", id, kept(id), 1);
    expect([store.get("", "a"), store.get("", "b")?.response, store.get("", "c")?.response]).toEqual([undefined, { id: "b" }, { id: "c" }]);
    now = 1001;
    expect(store.get("", "c")).toBeUndefined();
  });

  it("keeps no more bytes than its bound: the least recently used go first", () => {
    const store = createResponseStore({ maxEntries: 100, maxBytes: 300, maxAgeMs: 60_000 });
    for (const id of ["a", "b", "c"]) store.put("", id, kept(id), 100);
    expect(store.usage()).toEqual({ entries: 3, bytes: 300 });
    // Reading "a" makes "b" the least recently used.
    expect(store.get("", "a")).toBeDefined();
    store.put("", "d", kept("d"), 150);
    expect(ids(store, "", ["a", "b", "c", "d"])).toEqual(["a", "d"]);
    expect(store.usage()).toEqual({ entries: 2, bytes: 250 });
  });

  it("keeps nothing larger than the whole bound, and drops what that id held", () => {
    const store = createResponseStore({ maxEntries: 100, maxBytes: 300, maxAgeMs: 60_000 });
    store.put("", "a", kept("a"), 100);
    store.put("", "b", kept("b"), 100);
    store.put("", "a", kept("a"), 301);
    expect(ids(store, "", ["a", "b"])).toEqual(["b"]);
    expect(store.usage()).toEqual({ entries: 1, bytes: 100 });
  });

  it("counts a replaced or deleted entry's bytes out", () => {
    const store = createResponseStore({ maxEntries: 100, maxBytes: 300, maxAgeMs: 60_000 });
    store.put("", "a", kept("a"), 200);
    store.put("", "a", kept("a"), 250);
    expect(store.usage()).toEqual({ entries: 1, bytes: 250 });
    expect(store.delete("", "a")).toBe(true);
    expect(store.delete("", "a")).toBe(false);
    expect(store.usage()).toEqual({ entries: 0, bytes: 0 });
  });

  it("finds, and deletes, a response only in the scope that kept it", () => {
    const store = createResponseStore({ maxEntries: 100, maxBytes: 1000, maxAgeMs: 60_000 });
    store.put("alice", "r1", kept("r1"), 10);
    expect(store.get("bob", "r1")).toBeUndefined();
    expect(store.delete("bob", "r1")).toBe(false);
    expect(store.get("alice", "r1")?.response).toEqual({ id: "r1" });
    // The same id in two scopes is two entries.
    store.put("bob", "r1", kept("bob's"), 10);
    expect(store.get("alice", "r1")?.response).toEqual({ id: "r1" });
    expect(store.get("bob", "r1")?.response).toEqual({ id: "bob's" });
  });
});

describe("callerScope", () => {
  const request = (headers: Record<string, string>) => new Request("http://runner.test/v1/responses", { headers });

  it("without keys configured, is one scope whatever key a client sends", () => {
    const scopeOf = callerScope([]);
    expect(new Set([scopeOf(request({})), scopeOf(request({ authorization: "Bearer a" })), scopeOf(request({ "x-api-key": "b" }))])).toEqual(new Set([""]));
  });

  it("with keys, is one scope per key, the same by either header, and never the key itself", () => {
    const scopeOf = callerScope(["key-a", "key-b"]);
    const a = scopeOf(request({ authorization: "Bearer key-a" }));
    expect(scopeOf(request({ "x-api-key": "key-a" }))).toBe(a);
    expect(scopeOf(request({ authorization: "Bearer key-b" }))).not.toBe(a);
    expect(a).not.toContain("key-a");
    expect(a.length).toBeGreaterThan(20);
  });
});
