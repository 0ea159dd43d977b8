import type { RunnerInfo } from "../scheduler/scheduler.ts";
import type { Mode } from "../scheduler/types.ts";

// The gauges an inference pool's endpoint picker and autoscalers read, per model, as the Gateway API
// Inference Extension's model-server protocol names them (vLLM's names). Pure: computed from the
// scheduler's runners and what each runner answered on /metrics and /slots.

export type Scraped = { model: string; mode: Mode; text: string };

export type ModelGauges = {
  /** Our queue for a slot, plus requests llama-server deferred itself. */
  waiting: number;
  /** Requests holding a runner slot (those handed to llama-server that it holds back are waiting). */
  running: number;
  /** Tokens held by the slots at work over the context of all slots, 0 to 1. */
  kvUsage: number;
};

type Slot = { n_ctx?: number; is_processing?: boolean; n_prompt_tokens?: number };

export function modelGauges(runners: RunnerInfo[], metrics: Scraped[], slots: Scraped[]): Map<string, ModelGauges> {
  const out = new Map<string, ModelGauges & { held: number; context: number }>();
  const of = (model: string) => {
    let entry = out.get(model);
    if (!entry) out.set(model, (entry = { waiting: 0, running: 0, kvUsage: 0, held: 0, context: 0 }));
    return entry;
  };
  const deferredOf = new Map<string, number>();
  for (const { model, text } of metrics) deferredOf.set(model, (deferredOf.get(model) ?? 0) + deferred(text));
  for (const r of runners) {
    const entry = of(r.model);
    entry.waiting += r.waiting;
    entry.running += r.inUse;
  }
  // Requests handed ahead to llama-server (INFERENCE_RUNNER_QUEUE) count as ours in use, but wait
  // there for a slot (its deferred count): they are waiting, not running.
  for (const [model, count] of deferredOf) {
    const entry = of(model);
    const handedAhead = Math.min(count, entry.running);
    entry.running -= handedAhead;
    entry.waiting += count;
  }
  for (const { model, text } of slots) {
    const entry = of(model);
    for (const slot of parseSlots(text)) {
      entry.context += slot.n_ctx ?? 0;
      // A slot keeps its last prompt cached when idle, for reuse: that room is free to take, so
      // only slots at work count (as vLLM counts cached blocks no request holds as free).
      // n_prompt_tokens is the slot's cache: the prompt and what it generated so far.
      if (slot.is_processing) entry.held += slot.n_prompt_tokens ?? 0;
    }
  }
  return new Map(
    [...out].map(([model, { waiting, running, held, context }]) => [model, { waiting, running, kvUsage: context > 0 ? Math.min(1, held / context) : 0 }]),
  );
}

/** llama-server's `llamacpp:requests_deferred` (requests it holds back for want of a slot). */
function deferred(text: string): number {
  const value = /^llamacpp:requests_deferred(?:\{[^}]*\})?\s+(\S+)/m.exec(text)?.[1];
  return value === undefined ? 0 : Number(value) || 0;
}

function parseSlots(text: string): Slot[] {
  try {
    const json: unknown = JSON.parse(text);
    return Array.isArray(json) ? (json as Slot[]) : [];
  } catch {
    return [];
  }
}
