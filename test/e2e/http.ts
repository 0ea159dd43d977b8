import { request, type ClientRequest, type IncomingHttpHeaders } from "node:http";

// A plain HTTP/1.1 client over TCP or a Unix socket (node:http does both the same way), with the
// request object exposed so that a test can hang up in the middle.

export type Target = { port: number } | { socketPath: string };

export type Answer = { status: number; headers: IncomingHttpHeaders; body: string };

export function send(
  target: Target,
  path: string,
  method = "GET",
): { request: ClientRequest; answer: Promise<Answer> } {
  const where = "port" in target ? { host: "127.0.0.1", port: target.port } : { socketPath: target.socketPath };
  const outgoing = request({ ...where, path, method, agent: false });
  const answer = new Promise<Answer>((resolve, reject) => {
    outgoing.once("error", reject);
    outgoing.once("response", (response) => {
      let body = "";
      response.setEncoding("utf8");
      response.on("data", (chunk: string) => (body += chunk));
      response.once("end", () => resolve({ status: response.statusCode ?? 0, headers: response.headers, body }));
      response.once("error", reject);
    });
  });
  outgoing.end();
  return { request: outgoing, answer };
}

export const get = (target: Target, path: string, method = "GET") => send(target, path, method).answer;
