import { describe, expect, it } from "vitest";
import { HttpError } from "../../src/http/errors.ts";
import { routeTable, type Route } from "../../src/http/router.ts";

// The route table in process: exact paths take a map lookup instead of itty's scan, which must not
// change which route answers, nor how its errors look.

const named = (name: string): Route["handle"] => (request) => Response.json({ name, params: request.params });

const ROUTES: Route[] = [
  { method: "GET", path: "/models/:reference+", handle: named("model by reference") },
  // Shadowed by the pattern above: itty never reaches it, and neither may the lookup.
  { method: "GET", path: "/models/list", handle: named("shadowed") },
  { method: "GET", path: "/models", handle: named("list") },
  { method: "POST", path: "/v1/completions", handle: named("completions") },
  { method: "POST", path: "/v1/fails", handle: () => Promise.reject(new HttpError(409, "conflict_error", "busy", "it is busy")) },
  { method: "POST", path: "/v1/throws", handle: () => {
    throw new HttpError(400, "invalid_request_error", "bad", "bad input");
  } },
  { method: "POST", path: "/v1/crashes", handle: () => {
    throw new Error("a bug");
  } },
];

const handler = routeTable(ROUTES, { prefixes: ["", "/exp/vDD4.40"] });
const call = async (method: string, path: string) => {
  const response = await handler(new Request(`http://localhost${path}`, { method }));
  return { status: response.status, body: await response.json(), allow: response.headers.get("allow") };
};

describe("routeTable", () => {
  it("answers exact paths, under each prefix, with no parameters", async () => {
    expect(await call("POST", "/v1/completions")).toMatchObject({ status: 200, body: { name: "completions", params: {} } });
    expect(await call("POST", "/exp/vDD4.40/v1/completions")).toMatchObject({ status: 200, body: { name: "completions" } });
    expect(await call("GET", "/models?limit=1")).toMatchObject({ status: 200, body: { name: "list" } });
  });

  it("leaves an exact path to an earlier pattern that takes it, as itty would", async () => {
    expect(await call("GET", "/models/list")).toMatchObject({ status: 200, body: { name: "model by reference", params: { reference: "list" } } });
  });

  it("matches what the lookup does not: trailing slashes, escapes, patterns", async () => {
    expect(await call("POST", "/v1/completions/")).toMatchObject({ status: 200, body: { name: "completions" } });
    expect(await call("POST", "/v1/%63ompletions")).toMatchObject({ status: 404 });
    expect(await call("GET", "/models/ai/smollm2")).toMatchObject({ body: { params: { reference: "ai/smollm2" } } });
  });

  it("renders a handler's errors, thrown or rejected, in the OpenAI envelope", async () => {
    expect(await call("POST", "/v1/fails")).toMatchObject({ status: 409, body: { error: { code: "busy", type: "conflict_error", message: "it is busy" } } });
    expect(await call("POST", "/v1/throws")).toMatchObject({ status: 400, body: { error: { code: "bad" } } });
    expect(await call("POST", "/v1/crashes")).toMatchObject({ status: 500, body: { error: { code: "internal_error" } } });
  });

  it("refuses a method and path listed twice, where only the first would ever answer", () => {
    const twice: Route[] = [...ROUTES, { method: "GET", path: "/models", handle: named("again") }];
    expect(() => routeTable(twice)).toThrow("route GET /models is listed twice");
    // The same path under another method is another route.
    expect(() => routeTable([...ROUTES, { method: "DELETE", path: "/models", handle: named("delete") }])).not.toThrow();
  });

  it("answers another method 405 with Allow, and an unknown path 404", async () => {
    expect(await call("GET", "/v1/completions")).toMatchObject({ status: 405, allow: "POST" });
    expect(await call("POST", "/nowhere")).toMatchObject({ status: 404 });
  });
});
