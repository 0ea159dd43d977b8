import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { HttpError } from "../../src/http/errors.ts";
import { createMediaInliner, type MediaFetchOptions, type Resolve } from "../../src/inference/media/fetch.ts";
import { mediaRefs } from "../../src/inference/media/refs.ts";

// Remote media fetched by us rather than by llama-server: a name is resolved once, each address
// judged, the connection made to a judged address and judged again once connected; no redirect is
// followed; size and time are bounded. A loopback server stands in for the media host, and a test
// resolver for DNS; loopback counts as "public" only where a test says so.

type Media = { server: Server; port: number; hits: string[]; answer: (request: IncomingMessage, response: ServerResponse) => void; closed: number };

async function mediaHost(host: string): Promise<Media> {
  const media = { hits: [] as string[], closed: 0, answer: png } as Media;
  media.server = createServer((request, response) => {
    media.hits.push(request.url ?? "");
    request.socket.once("close", () => media.closed++);
    media.answer(request, response);
  });
  await new Promise<void>((resolve) => media.server.listen(0, host, resolve));
  media.port = (media.server.address() as AddressInfo).port;
  return media;
}

const PNG = Buffer.from("89504e470d0a1a0a0000000d49484452", "hex");
const png = (_request: IncomingMessage, response: ServerResponse) => {
  response.writeHead(200, { "content-type": "image/png", "content-length": PNG.byteLength });
  response.end(PNG);
};

/** A resolver that answers from a table, counting its calls; each name may answer differently per call. */
function resolver(table: Record<string, string[][]>) {
  const calls: string[] = [];
  const resolve: Resolve = (hostname, done) => {
    const answers = table[hostname];
    const answer = answers?.[Math.min(calls.filter((c) => c === hostname).length, answers.length - 1)];
    calls.push(hostname);
    if (!answer) return done(Object.assign(new Error(`getaddrinfo ENOTFOUND ${hostname}`), { code: "ENOTFOUND" }), []);
    done(null, answer.map((address) => ({ address, family: address.includes(":") ? 6 : 4 })));
  };
  return { resolve, calls };
}

/** Runs the inliner on one chat image part; resolves with the part's URL after, or the HttpError. */
async function inline(url: string, options: Partial<MediaFetchOptions>, kind: "image_url" | "input_audio" = "image_url") {
  const part = kind === "image_url" ? { type: "image_url", image_url: { url } } : { type: "input_audio", input_audio: { url } };
  const body = { messages: [{ role: "user", content: [part] }] };
  try {
    await createMediaInliner({ maxBytes: 1 << 20, timeoutMs: 5_000, ...options })(mediaRefs(body), new AbortController().signal);
    return kind === "image_url" ? (part as { image_url: { url: string } }).image_url.url : (part as { input_audio: { url: string } }).input_audio.url;
  } catch (error) {
    if (!(error instanceof HttpError)) throw error;
    return error;
  }
}

const loopbackAllowed = (address: string) => address.startsWith("127.") || address === "::ffff:127.0.0.1";

let media: Media;
let other: Media;
beforeAll(async () => {
  media = await mediaHost("127.0.0.1");
  // A second loopback address, so that "judged" and "not judged" can both be on this machine. Never
  // on the first's port: the kernel may give both addresses the same one, and then a call to
  // 127.0.0.2 at the first's port, meant to be refused, reaches this host (seen once in a full run).
  other = await mediaHost("127.0.0.2");
  while (other.port === media.port) {
    const taken = other;
    other = await mediaHost("127.0.0.2");
    await new Promise((resolve) => taken.server.close(resolve));
  }
});
afterAll(async () => {
  for (const host of [media, other]) {
    host.server.closeAllConnections();
    await new Promise((resolve) => host.server.close(resolve));
  }
});
beforeEach(() => {
  for (const host of [media, other]) {
    host.hits.length = 0;
    host.closed = 0;
    host.answer = png;
  }
});

const code = (result: unknown) => (result instanceof HttpError ? `${result.status} ${result.code}` : result);

describe("where a name points", () => {
  it("a name that resolves to 127.0.0.1 is refused, and nothing is connected to", async () => {
    const dns = resolver({ "cats.example": [["127.0.0.1"]] });
    const result = await inline(`http://cats.example:${media.port}/cat.png`, { resolve: dns.resolve });
    expect(code(result)).toBe("400 media_not_allowed");
    expect((result as HttpError).message).toContain("127.0.0.1");
    expect(media.hits).toEqual([]);
  });

  it("localhost, through the system resolver, is refused", async () => {
    expect(code(await inline(`http://localhost:${media.port}/cat.png`, {}))).toBe("400 media_not_allowed");
    expect(media.hits).toEqual([]);
  });

  it.each([["10.0.0.1"], ["169.254.169.254"], ["fd00::1"], ["::1"], ["::ffff:127.0.0.1"], ["100.100.100.200"]])(
    "a name that resolves to %s is refused",
    async (address) => {
      const dns = resolver({ "cats.example": [[address]] });
      expect(code(await inline(`http://cats.example:${media.port}/cat.png`, { resolve: dns.resolve }))).toBe("400 media_not_allowed");
    },
  );

  it("one address that is not public among public ones refuses the name", async () => {
    const dns = resolver({ "cats.example": [["8.8.8.8", "127.0.0.1"]] });
    expect(code(await inline(`http://cats.example:${media.port}/cat.png`, { resolve: dns.resolve }))).toBe("400 media_not_allowed");
    expect(media.hits).toEqual([]);
  });

  it("DNS rebinding: the name is resolved once, and the connection goes to the address judged", async () => {
    // Judged: 127.0.0.2 only. The name answers 127.0.0.2 first, then 127.0.0.1 to any later lookup.
    const dns = resolver({ "cats.example": [["127.0.0.2"], ["127.0.0.1"]] });
    const result = await inline(`http://cats.example:${media.port}/cat.png`, { resolve: dns.resolve, isAllowed: (a) => a === "127.0.0.2" });
    // The host on 127.0.0.2 listens on another port: a connection to a judged address, refused there.
    expect(code(result)).toBe("400 media_fetch_failed");
    expect(dns.calls).toEqual(["cats.example"]);
    expect(media.hits).toEqual([]);

    const again = resolver({ "cats.example": [["127.0.0.2"], ["127.0.0.1"]] });
    const fetched = await inline(`http://cats.example:${other.port}/cat.png`, { resolve: again.resolve, isAllowed: (a) => a === "127.0.0.2" });
    expect(fetched).toBe(`data:image/png;base64,${PNG.toString("base64")}`);
    expect(again.calls).toEqual(["cats.example"]);
    expect(other.hits).toEqual(["/cat.png"]);
  });

  it("the address connected to is judged again, once connected", async () => {
    // Allowed when the name is resolved, refused when the socket says where it went.
    let judged = 0;
    const dns = resolver({ "cats.example": [["127.0.0.1"]] });
    const result = await inline(`http://cats.example:${media.port}/cat.png`, { resolve: dns.resolve, isAllowed: () => judged++ === 0 });
    expect(code(result)).toBe("400 media_not_allowed");
    expect((result as HttpError).message).toContain("connected to 127.0.0.1");
    expect(judged).toBe(2);
    expect(media.hits).toEqual([]);
  });

  it("an address written in the URL is judged without a lookup", async () => {
    const dns = resolver({});
    expect(code(await inline(`http://127.0.0.1:${media.port}/cat.png`, { resolve: dns.resolve }))).toBe("400 media_not_allowed");
    expect(dns.calls).toEqual([]);
    expect(media.hits).toEqual([]);
  });
});

describe("what is fetched, where the address is allowed", () => {
  const allowed = { isAllowed: loopbackAllowed, resolve: resolver({ "cats.example": [["127.0.0.1"]] }).resolve };
  const url = (path: string) => `http://cats.example:${media.port}${path}`;

  it("becomes a data: URL of its type", async () => {
    expect(await inline(url("/cat.png"), allowed)).toBe(`data:image/png;base64,${PNG.toString("base64")}`);
    expect(media.hits).toEqual(["/cat.png"]);
  });

  it("of a type that is not of its kind, a data: URL of the kind (llama-server takes only image/, audio/, video/)", async () => {
    media.answer = (_request, response) => response.writeHead(200, { "content-type": "text/html" }).end("RIFF");
    expect(await inline(url("/a.wav"), allowed, "input_audio")).toBe(`data:audio/octet-stream;base64,${Buffer.from("RIFF").toString("base64")}`);
  });

  it("a redirect is not followed", async () => {
    media.answer = (_request, response) => response.writeHead(302, { location: "http://127.0.0.1:1/admin" }).end();
    const result = await inline(url("/cat.png"), allowed);
    expect(code(result)).toBe("400 media_fetch_failed");
    expect((result as HttpError).message).toMatch(/redirects are not followed/);
    expect(media.hits).toEqual(["/cat.png"]);
  });

  it("an error status fails the request", async () => {
    media.answer = (_request, response) => response.writeHead(404).end();
    expect(code(await inline(url("/cat.png"), allowed))).toBe("400 media_fetch_failed");
  });

  it.each([
    ["declared", (_request: IncomingMessage, response: ServerResponse) => response.writeHead(200, { "content-length": String(2 << 20) }).write(Buffer.alloc(1024))],
    [
      "streamed",
      (_request: IncomingMessage, response: ServerResponse) => {
        response.writeHead(200, { "content-type": "image/png" });
        const chunk = Buffer.alloc(64 * 1024);
        const pump = () => {
          for (let i = 0; i < 64 && !response.destroyed; i++) if (!response.write(chunk)) return void response.once("drain", pump);
        };
        pump();
      },
    ],
  ])("a body past the bound (%s) fails the request, and its connection is closed", async (_, answer) => {
    media.answer = answer;
    const result = await inline(url("/big.png"), { ...allowed, maxBytes: 256 * 1024 });
    expect(code(result)).toBe("400 media_fetch_failed");
    expect((result as HttpError).message).toMatch(/larger than/);
    for (let i = 0; i < 200 && media.closed === 0; i++) await new Promise((resolve) => setTimeout(resolve, 10));
    expect(media.closed).toBe(1);
  });

  it("a host that does not answer in time fails the request", async () => {
    media.answer = () => {};
    const result = await inline(url("/slow.png"), { ...allowed, timeoutMs: 200 });
    expect(code(result)).toBe("400 media_fetch_failed");
  });

  it("the bytes of all of a request's media together are bounded", async () => {
    const body = { messages: [{ role: "user", content: [1, 2, 3].map((i) => ({ type: "image_url", image_url: { url: url(`/${i}.png`) } })) }] };
    const inliner = createMediaInliner({ ...allowed, maxBytes: 2 * PNG.byteLength, timeoutMs: 5_000 });
    const error = await inliner(mediaRefs(body), new AbortController().signal).catch((e: unknown) => e);
    expect(code(error)).toBe("400 media_fetch_failed");
    expect(media.hits).toEqual(["/1.png", "/2.png", "/3.png"]);
  });
});
