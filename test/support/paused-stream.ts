import { request, type IncomingMessage } from "node:http";

// A streamed answer whose reader stops after the first chunk, so that the request stays in flight on
// the server (its runner slot held) for as long as the test wants; `rest()` reads on to its end.
// Over a Unix socket, whose buffers hold about 200 KiB: an answer well above that cannot have been
// handed over whole while its reader waits.

export type PausedStream = { rest(): Promise<string> };

export async function pausedStream(socketPath: string, path: string, body: object): Promise<PausedStream> {
  const outgoing = request({ socketPath, method: "POST", path, agent: false, headers: { "content-type": "application/json" } });
  outgoing.end(JSON.stringify(body));
  const response = await new Promise<IncomingMessage>((resolve, reject) => outgoing.once("response", resolve).once("error", reject));
  if (response.statusCode !== 200) throw new Error(`stream answered ${response.statusCode}`);
  let text = "";
  await new Promise<void>((resolve) => response.once("data", (chunk: Buffer) => ((text += chunk.toString("utf8")), resolve())));
  response.pause();
  return {
    rest: () =>
      new Promise((resolve, reject) => {
        response.on("data", (chunk: Buffer) => (text += chunk.toString("utf8")));
        response.once("end", () => resolve(text));
        response.once("error", reject);
        response.resume();
      }),
  };
}

/**
 * A chat body whose streamed events are large (20 top log-probabilities each): 440 tokens make
 * near 0.5 MB, and 440 plus the prompt still fits the tiny model's 512-token context.
 */
export const bulkyChat = (model: string, extra: object = {}) => ({
  model,
  messages: [{ role: "user", content: "hi" }],
  max_tokens: 440,
  logprobs: true,
  top_logprobs: 20,
  stream: true,
  ignore_eos: true,
  ...extra,
});
