import { request, type IncomingHttpHeaders } from "node:http";

// A plain HTTP/1.1 client over TCP or a Unix socket, with a body, that can hang up mid-answer.

export type Target = { url: string } | { socketPath: string };

export type Answer = { status: number; headers: IncomingHttpHeaders; body: string; json(): any };

export function call(target: Target, method: string, path: string, body?: string | object, headers: Record<string, string> = {}) {
  const where = "url" in target ? { host: new URL(target.url).hostname, port: Number(new URL(target.url).port) } : { socketPath: target.socketPath };
  const payload = body === undefined ? undefined : typeof body === "string" ? body : JSON.stringify(body);
  const outgoing = request({
    ...where,
    method,
    path,
    agent: false,
    headers: { ...(payload !== undefined ? { "content-type": "application/json" } : {}), ...headers },
  });
  const answer = new Promise<Answer>((resolve, reject) => {
    outgoing.once("error", reject);
    outgoing.once("response", (response) => {
      let text = "";
      response.setEncoding("utf8");
      response.on("data", (chunk: string) => (text += chunk));
      response.once("end", () =>
        resolve({ status: response.statusCode ?? 0, headers: response.headers, body: text, json: () => JSON.parse(text) }),
      );
      response.once("error", reject);
    });
  });
  outgoing.end(payload);
  return { request: outgoing, answer };
}

/** Sends and waits for the whole answer. */
export const ask = (target: Target, method: string, path: string, body?: string | object, headers?: Record<string, string>) =>
  call(target, method, path, body, headers).answer;

/** Starts a streamed answer and resolves once `count` SSE events have arrived; `hangUp` leaves. */
export function openStream(target: Target, path: string, body: object, count = 1) {
  const { request: outgoing, answer } = call(target, "POST", path, body);
  // Hanging up is how these streams end: the aborted answer is expected.
  answer.catch(() => {});
  let text = "";
  let status = 0;
  const ended = new Promise<string>((resolve) => {
    outgoing.once("error", () => resolve(text));
    outgoing.once("response", (response) => {
      status = response.statusCode ?? 0;
      response.setEncoding("utf8");
      response.on("data", (chunk: string) => (text += chunk));
      response.once("end", () => resolve(text));
      response.once("error", () => resolve(text));
    });
  });
  const started = new Promise<void>((resolve, reject) => {
    const check = setInterval(() => {
      if (text.split("\n\n").filter((e) => e.startsWith("data: ")).length >= count) {
        clearInterval(check);
        resolve();
      }
    }, 5);
    void ended.then(() => {
      clearInterval(check);
      if (text.split("\n\n").filter((e) => e.startsWith("data: ")).length >= count) resolve();
      else reject(new Error(`stream ended (status ${status}) after: ${text}`));
    });
  });
  return {
    started,
    ended,
    status: () => status,
    text: () => text,
    hangUp: () => outgoing.destroy(),
  };
}
