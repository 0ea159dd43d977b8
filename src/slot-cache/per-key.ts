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
// Anthropic's Messages come as chats too (src/dialects/anthropic/), so `cache_prompt` holds for them.

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
      return runner.fetch(input, { ...init, headers, body: withoutReuse(init.body) });
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
