import { describe, expect, it } from "vitest";
import { album, parseExact, usePhotoService, type ErrorBody } from "./harness.ts";
import { json, photoJson, photosJson } from "./photo-service.ts";

// The album service's rules, against a real photo service on loopback.

const service = usePhotoService();
const get = (path: string, init?: RequestInit) => album({ baseUrl: service.upstream.url })(path, init);

describe("GET /api/albums/{albumId}", () => {
  it("calls the photo service exactly once, asking for JSON, and wraps its photos", async () => {
    const response = await get("/api/albums/7");
    expect(response.status).toBe(200);
    expect(response.headers.get("content-type")).toMatch(/^application\/json/);
    expect(await response.json()).toEqual({
      albumId: 7,
      photos: [1, 2, 3].map((id) => ({
        id,
        title: `photo ${id}`,
        url: `https://img.example/600/${id}`,
        thumbnailUrl: `https://img.example/150/${id}`,
      })),
    });
    expect(service.upstream.requests).toHaveLength(1);
    const [call] = service.upstream.requests;
    expect(call?.method).toBe("GET");
    expect(call?.url).toBe("/albums/7/photos");
    expect(call?.headers.accept).toBe("application/json");
  });

  it("forwards neither the client's headers nor its query", async () => {
    await get("/api/albums/7?_limit=1&token=secret", {
      headers: { authorization: "Bearer secret", cookie: "s=1", "x-request-id": "abc", accept: "text/html" },
    });
    const [call] = service.upstream.requests;
    expect(call?.url).toBe("/albums/7/photos");
    expect(call?.headers.accept).toBe("application/json");
    for (const name of ["authorization", "cookie", "x-request-id"]) expect(call?.headers).not.toHaveProperty(name);
  });

  it("keeps the photo service's order and drops fields the contract does not name", async () => {
    const extra = `,"colour":"red","nested":{"id":1}`;
    service.upstream.answerWith(json(`[${photoJson("30", "1", extra)},${photoJson("10")},${photoJson("20")}]`));
    const body = (await (await get("/api/albums/1")).json()) as { photos: Record<string, unknown>[] };
    expect(body.photos.map((p) => p.id)).toEqual([30, 10, 20]);
    for (const photo of body.photos) expect(Object.keys(photo)).toEqual(["id", "title", "url", "thumbnailUrl"]);
  });

  it("answers an empty album with an empty list", async () => {
    service.upstream.answerWith(json("[]"));
    expect(await (await get("/api/albums/1")).json()).toEqual({ albumId: 1, photos: [] });
  });

  it("passes null titles and urls through as null", async () => {
    service.upstream.answerWith(json(`[{"id":1,"title":null,"url":null,"thumbnailUrl":null}]`));
    const body = await (await get("/api/albums/1")).json();
    expect(body).toEqual({ albumId: 1, photos: [{ id: 1, title: null, url: null, thumbnailUrl: null }] });
  });

  it("keeps titles with quotes, backslashes, control characters and non-ASCII intact", async () => {
    const title = 'a "quoted" \\ back\tslash\n, \u2028 and ümlaut 😀';
    service.upstream.answerWith(json(JSON.stringify([{ id: 1, title, url: "u", thumbnailUrl: "t" }])));
    const body = (await (await get("/api/albums/1")).json()) as { photos: { title: string }[] };
    expect(body.photos[0]?.title).toBe(title);
  });
});

describe("64-bit ids", () => {
  const ids = [
    "0",
    "-1",
    "9007199254740991", // 2^53 - 1
    "9007199254740992", // 2^53
    "9007199254740993", // 2^53 + 1: the first integer a JavaScript number cannot hold
    "-9007199254740993",
    "9223372036854775806",
    "9223372036854775807", // 2^63 - 1
    "-9223372036854775807",
    "-9223372036854775808", // -2^63
  ];

  it.each(ids)("echoes album id %s exactly and asks the photo service for that album", async (id) => {
    service.upstream.answerWith(json("[]"));
    const response = await get(`/api/albums/${id}`);
    expect(response.status).toBe(200);
    expect(parseExact(await response.text())).toEqual({ albumId: id, photos: [] });
    expect(service.upstream.requests.map((r) => r.url)).toEqual([`/albums/${id}/photos`]);
  });

  it("echoes photo ids at and around 2^53, 2^63 - 1 and -2^63 exactly", async () => {
    service.upstream.answerWith(json(photosJson(ids)));
    const response = await get("/api/albums/1");
    expect(response.status).toBe(200);
    const body = parseExact(await response.text()) as { photos: { id: string }[] };
    expect(body.photos.map((p) => p.id)).toEqual(ids);
  });

  it.each([
    ["a leading plus", "+42", "42"],
    ["leading zeros", "007", "7"],
    ["minus zero", "-0", "0"],
  ])("reads an id with %s as the integer it denotes", async (_, given, canonical) => {
    service.upstream.answerWith(json("[]"));
    const response = await get(`/api/albums/${given}`);
    expect(parseExact(await response.text())).toEqual({ albumId: canonical, photos: [] });
    expect(service.upstream.requests.map((r) => r.url)).toEqual([`/albums/${canonical}/photos`]);
  });

  it.each([
    ["abc", "abc"],
    ["a decimal", "1.5"],
    ["an exponent", "1e3"],
    ["hexadecimal", "0x10"],
    ["empty", ""],
    ["a space", "%201"],
    ["2^63", "9223372036854775808"],
    ["-2^63 - 1", "-9223372036854775809"],
    ["far out of range", "123456789012345678901234567890"],
    ["a sign alone", "-"],
  ])("rejects %s (%j) with 400 and no upstream call", async (_, id) => {
    const response = await get(`/api/albums/${id}`);
    expect(response.status).toBe(400);
    const body = (await response.json()) as ErrorBody;
    expect(body.error).toMatchObject({ type: "invalid_request_error", code: "invalid_album_id" });
    expect(service.upstream.requests).toHaveLength(0);
  });
});

describe("base URL", () => {
  it("keeps a path prefix", async () => {
    const response = await album({ baseUrl: `${service.upstream.url}/v1/photo-api` })("/api/albums/5");
    expect(response.status).toBe(200);
    expect(service.upstream.requests.map((r) => r.url)).toEqual(["/v1/photo-api/albums/5/photos"]);
  });
});

describe("routing", () => {
  it.each(["POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"])("answers %s with 405 and Allow: GET", async (method) => {
    const response = await get("/api/albums/1", { method });
    expect(response.status).toBe(405);
    expect(response.headers.get("allow")).toBe("GET");
    if (method !== "HEAD") expect(((await response.json()) as ErrorBody).error.type).toBe("method_not_allowed_error");
    expect(service.upstream.requests).toHaveLength(0);
  });

  it.each(["/", "/api", "/api/album/1", "/api/albums/1/photos", "/albums/1/photos"])(
    "answers unknown path %s with a JSON 404",
    async (path) => {
      const response = await get(path);
      expect(response.status).toBe(404);
      expect(response.headers.get("content-type")).toMatch(/^application\/json/);
      expect(((await response.json()) as ErrorBody).error).toMatchObject({ type: "not_found_error", code: "not_found" });
      expect(service.upstream.requests).toHaveLength(0);
    },
  );
});
