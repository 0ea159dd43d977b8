import type { RunnerProcess, StartRunner } from "../scheduler/types.ts";

// Prompt caches per key (INFERENCE_PROMPT_CACHE_PER_KEY): one key must not learn from timings,
// `cache_n` or cached-token counts whether another key's conversation starts with what it sends.
//
// llama-server picks a request's slot itself (the one whose prompt shares the longest start with
// it, else the least recently used), and its prompt cache in memory is shared by all slots: within
// one runner, a key's prompts cannot be kept apart from another's short of one slot per key. So
// the unit kept per key is the runner: each remembers whose prompts it may hold (its own requests',
// and those of the slots it restored), and a request whose key is not the only one there is sent
// with `cache_prompt: false`, so llama-server processes its whole prompt and reuses nothing. A
// runner that only one key has used reuses its cache as before; one that several keys have shared
// reuses none until it is stopped.
//
// llama-server's Anthropic endpoint (v0.5.0) drops `cache_prompt` as it translates the body: there a
// request still reuses any cache. Its answer's count of cached tokens is folded into `input_tokens`
// (the total is the same), so the count says nothing; its time to answer still may (docs/security.md).

/** The header forward() names a request's key in; read and removed here, never sent to llama-server. */
export const KEY_HEADER = "x-llamadock-key";

/** A holder that is not a key's name (names are `[\w.@-]`): a restored slot whose keys were not kept. */
export const SOMEONE = "(unknown)";

const holders = new WeakMap<RunnerProcess, Set<string>>();

/** Whose prompts `runner`'s slots may hold, by key name (one set per runner, made on first ask). */
export function promptHolders(runner: RunnerProcess): Set<string> {
  let held = holders.get(runner);
  if (!held) holders.set(runner, (held = new Set()));
  return held;
}

/** Runners whose requests reuse a cache only where their key alone has used the runner. */
export function withPromptsPerKey(start: StartRunner): StartRunner {
  return async (spec, signal) => {
    const runner = await start(spec, signal);
    const held = promptHolders(runner);
    const fetch = ((input: string | URL | Request, init: RequestInit = {}) => {
      const headers = new Headers(init.headers);
      const key = headers.get(KEY_HEADER);
      if (key === null) return runner.fetch(input, init);
      headers.delete(KEY_HEADER);
      // Decided before the key is added: a runner new to this key, or shared, reuses nothing for it.
      const alone = [...held].every((name) => name === key);
      held.add(key);
      if (alone) return runner.fetch(input, { ...init, headers });
      const answer = runner.fetch(input, { ...init, headers, body: withoutReuse(init.body) });
      return new URL(input instanceof Request ? input.url : input).pathname === "/v1/messages" ? answer.then(foldCachedCount) : answer;
    }) as typeof globalThis.fetch;
    const { copySlot, parking } = runner;
    return { fetch, exited: runner.exited, running: () => runner.running(), stop: (held) => runner.stop(held), kill: () => runner.kill(), ...(copySlot ? { copySlot: (from: number) => copySlot.call(runner, from) } : {}), ...(parking ? { parking } : {}) };
  };
}

/** The body with `cache_prompt: false` (llama-server then takes nothing from its caches for it). */
function withoutReuse(body: RequestInit["body"]): RequestInit["body"] {
  if (!(body instanceof Uint8Array)) return body;
  try {
    const json = JSON.parse(new TextDecoder().decode(body)) as unknown;
    if (!json || typeof json !== "object" || Array.isArray(json)) return body;
    return new TextEncoder().encode(JSON.stringify({ ...json, cache_prompt: false }));
  } catch {
    return body; // not JSON: checked before it came here, so never; sent as it is
  }
}

/** An Anthropic answer (whole, or a stream whose first event carries the usage) without its cached count. */
async function foldCachedCount(response: Response): Promise<Response> {
  if (!response.body) return response;
  const headers = new Headers(response.headers);
  headers.delete("content-length");
  const init = { status: response.status, statusText: response.statusText, headers };
  if (!headers.get("content-type")?.includes("text/event-stream")) return new Response(fold(await response.text()), init);
  // The usage comes in the first event, message_start: held until it is whole, the rest passes as it comes.
  const decoder = new TextDecoder();
  const encoder = new TextEncoder();
  let head: string | undefined = "";
  const stream = response.body.pipeThrough(
    new TransformStream<Uint8Array, Uint8Array>({
      transform(chunk, out) {
        if (head === undefined) return out.enqueue(chunk);
        head += decoder.decode(chunk, { stream: true });
        if (!head.includes("\n\n")) return;
        out.enqueue(encoder.encode(fold(head)));
        head = undefined;
      },
      flush(out) {
        if (head) out.enqueue(encoder.encode(fold(head + decoder.decode())));
      },
    }),
  );
  return new Response(stream, init);
}

/** `cache_read_input_tokens` made 0, its tokens added to `input_tokens` (the first of each: one usage). */
export function fold(text: string): string {
  const cached = Number(/"cache_read_input_tokens":(\d+)/.exec(text)?.[1] ?? 0);
  if (!cached) return text;
  return text.replace(/"cache_read_input_tokens":\d+/, '"cache_read_input_tokens":0').replace(/"input_tokens":(\d+)/, (_, n: string) => `"input_tokens":${Number(n) + cached}`);
}
