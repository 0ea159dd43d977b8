import { randomBytes, timingSafeEqual } from "node:crypto";
import { connect, createServer, type Socket } from "node:net";

// Agents speak HTTP over TCP only, and the model runner's default door is its Unix socket. For the
// agent's lifetime a loopback port relays connections byte for byte to the socket. The socket is
// owner-only and trusts its peer, and any local user can reach a loopback port: so a connection is
// relayed only once its first request carries the relay's token (a random key given to the agent
// alone, as `Authorization: Bearer` or `x-api-key`); the rest of a kept-alive connection is the
// same peer's. A connection that has not shown the token yet holds nothing of the runner's, and
// is bounded: its head must come within a deadline, and past a number of them waiting at once the
// oldest is closed (not the newest: the agent's own connections show the token at once, so a
// local user who opens many cannot keep the agent out).

export type Relay = { url: string; token: string; close(): void };

/** Bounds on the connections that have not shown the token yet. */
export type RelayLimits = { headTimeoutMs: number; waitingMax: number };

/** The server's own header deadline (HTTP_HEADERS_TIMEOUT_MS's default), and far more connections than an agent opens at once. */
export const RELAY_LIMITS: RelayLimits = { headTimeoutMs: 10_000, waitingMax: 64 };

/** Where a request's head ends; a head larger than this is refused. */
const HEAD_LIMIT = 64 * 1024;

function refuse(client: Socket, status: string, message: string, code: string, type = "authentication_error"): void {
  const body = JSON.stringify({ error: { message, type, code } });
  client.end(`HTTP/1.1 ${status}\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\nconnection: close\r\n\r\n${body}`);
}

/** The key a request head carries, if any. */
export function keyOf(head: string): string | undefined {
  for (const line of head.split("\r\n").slice(1)) {
    const colon = line.indexOf(":");
    const name = line.slice(0, colon).trim().toLowerCase();
    const value = line.slice(colon + 1).trim();
    if (name === "x-api-key") return value;
    if (name === "authorization" && /^bearer /i.test(value)) return value.slice(7).trim();
  }
  return undefined;
}

const sameKey = (given: string | undefined, token: string) => given !== undefined && given.length === token.length && timingSafeEqual(Buffer.from(given), Buffer.from(token));

export async function startRelay(socketPath: string, limits: RelayLimits = RELAY_LIMITS): Promise<Relay> {
  const token = `llamadock-${randomBytes(24).toString("hex")}`;
  const open = new Set<Socket>();
  /** Connections that have not shown the token yet, oldest first, with their deadlines. */
  const waiting = new Map<Socket, ReturnType<typeof setTimeout>>();
  const settled = (client: Socket) => {
    clearTimeout(waiting.get(client));
    waiting.delete(client);
  };

  const server = createServer((client) => {
    open.add(client);
    client.on("close", () => {
      open.delete(client);
      settled(client);
    });
    client.on("error", () => client.destroy());
    const oldest = waiting.size >= limits.waitingMax ? waiting.keys().next().value : undefined;
    if (oldest) {
      settled(oldest);
      oldest.destroy();
    }
    const deadline = setTimeout(() => {
      settled(client);
      refuse(client, "408 Request Timeout", `this port relays to the model runner for the agent it was opened for: a request's head must come within ${limits.headTimeoutMs} ms`, "header_timeout", "timeout_error");
      client.destroySoon();
    }, limits.headTimeoutMs);
    waiting.set(client, deadline);
    let head = Buffer.alloc(0);
    const onData = (chunk: Buffer) => {
      head = Buffer.concat([head, chunk]);
      const end = head.indexOf("\r\n\r\n");
      if (end < 0) {
        if (head.length > HEAD_LIMIT) {
          settled(client);
          refuse(client, "431 Request Header Fields Too Large", "request head too large", "header_too_large");
        }
        return;
      }
      settled(client);
      client.off("data", onData);
      client.pause();
      if (!sameKey(keyOf(head.subarray(0, end).toString("latin1")), token)) return refuse(client, "401 Unauthorized", "this port relays to the model runner for the agent it was opened for: its key is missing or wrong", "invalid_api_key");
      const upstream = connect(socketPath);
      upstream.on("error", () => {
        // Nothing was answered yet if the socket could not be reached: say so, in the API's shape.
        if (upstream.bytesRead === 0 && !client.destroyed) refuse(client, "502 Bad Gateway", `the model runner's socket ${socketPath} cannot be reached`, "runner_unreachable");
        else client.destroy();
      });
      // What the runner sent is flushed to the agent before its side closes.
      upstream.on("close", () => client.end());
      client.on("close", () => upstream.destroy());
      upstream.write(head);
      client.pipe(upstream);
      upstream.pipe(client);
      client.resume();
    };
    client.on("data", onData);
  });

  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => resolve());
  });
  const { port } = server.address() as { port: number };
  return {
    url: `http://127.0.0.1:${port}`,
    token,
    close() {
      server.close();
      for (const socket of open) socket.destroy();
      for (const client of [...waiting.keys()]) settled(client);
    },
  };
}
