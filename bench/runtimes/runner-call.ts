// How the bare proxies (floor.ts, and adapter-proxy.ts through our adapter) ask the runner: a
// stream's request with `Connection: close`, as ours sends it (llama-server closes the connection
// after a stream anyway). They tell a stream without parsing the body; ours parses it.

/** Whether a request body asks for a stream. */
const STREAM_FIELD = Buffer.from('"stream":true');
export const streamed = (body: Uint8Array) => Buffer.from(body.buffer, body.byteOffset, body.byteLength).includes(STREAM_FIELD);

/** The runner call's headers for `body`. */
export const callHeaders = (body: Uint8Array): Record<string, string> => (streamed(body) ? { "content-type": "application/json", connection: "close" } : { "content-type": "application/json" });
