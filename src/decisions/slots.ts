import { anySignal } from "../http/abort.ts";
import { requestTimedOut } from "../inference/bounds.ts";
import type { Lease } from "../scheduler/runner.ts";
import { hasMedia, type Answer, type Ask } from "./core.ts";
import { runnerMark, withRunnerMarks } from "./media.ts";
import { askOne, clearSlot, cutSlot, labelForms, prompter, promptTokens, runnerCalls, templatedInputTokens, type Asked, type Prompter, type RunnerCalls } from "./question.ts";
import { TILE_TOKENS, tiles, type Tiles } from "./tiles.ts";

// A request's questions over the runner's slots, the input processed once.
//
// Every question's prompt is the templated input plus the question (core.ts), so a slot that holds
// the input processes only a question's own text and one token. The first question, in whichever
// slot llama-server gives it, processes the input. Further slots get it from llama-server's host
// prompt cache (`--cache-ram`), one after the other, each while the first slot is idle: at the
// start of each task llama-server saves its idle slots there (`--cache-idle-slots`, on by default),
// and a slot asked by `id_slot` loads the cached prompt that best continues its task, but only when
// what it holds shares under half with that task (an empty slot never loads: its share is 0/0), so
// the slot is first given a few unrelated tokens (`clearSlot`). An entry is consumed by the slot
// that loads it, and saved again at the next task's start while the first slot is idle: hence one
// slot at a time. Then every slot that holds the input takes questions until none is left. On a
// CPU, each slot is cut back a little after each question, so that the next one's step is not
// llama.cpp's slowest (tiles.ts).
//
// A slot whose first question processed the input again (no host cache, another model's
// prompts pushed it out) is the last to join, unless the input is short: more slots would each
// cost the whole input. Each slot is one lease of the runner's, taken in the caller's turn like
// any request's; slots whose lease is not granted by the time they could join stay out.

/** An input this short (in tokens) costs little to process again in another slot. */
const SHORT_INPUT_TOKENS = 256;
/** Tokens where the input meets a question, which a tokenizer may merge differently in either. */
const SEAM_TOKENS = 16;

export type Usage = { input: number; cached: number; output: number };

export type SlotRun = {
  /** The model's name, for errors. */
  model: string;
  request: Request;
  /** The request's time limit. */
  timeoutMs: number;
  /** The runner's slots (llama-server's `--parallel`). */
  slots: number;
  /** Another lease of the same runner, in the caller's turn. */
  acquire(signal: AbortSignal): Promise<Lease>;
  /** The caller's key, for runners that keep prompt caches per key. */
  key: string | undefined;
  /** Whether to cut each slot back after a question (tiles.ts): runners on the CPU. */
  tiled: boolean;
};

/** A slot's lease and calls; `kept`: the tokens its last cut left in it (tiles.ts). */
type Worker = { runner: RunnerCalls; slot?: number; kept?: number; ready: Promise<void>; release(): void };

/** The answers in question order, the tokens they took, and how many of the runner's slots asked them. */
export async function askAll(run: SlotRun, first: Lease, ask: Ask): Promise<{ answers: Answer[]; usage: Usage; slots: number }> {
  // Ends every call at once: the request's time is up, or one call failed (the request fails).
  const stop = new AbortController();
  const timer = setTimeout(() => stop.abort(requestTimedOut(run.model, run.timeoutMs)), run.timeoutMs);
  const extra = leasePool(run, Math.min(run.slots, ask.questions.length) - 1, stop.signal);
  const workers: Worker[] = [];
  try {
    const lead = worker(run, first, stop.signal);
    workers.push(lead);
    await lead.ready;
    const queue = await questionQueue(lead.runner, ask, run.tiled);
    lead.slot = (await queue.askNext(lead))?.slot;
    await seed(run, ask, { lead, extra, queue, workers, stop: stop.signal });
    extra.close();
    await Promise.all(workers.map(async (w) => void (await drain(queue, w))));
    return { answers: queue.answers, usage: queue.usage, slots: workers.length };
  } catch (error) {
    stop.abort(error);
    throw error;
  } finally {
    clearTimeout(timer);
    extra.close();
    for (const w of workers) w.release();
  }
}

type Queue = Awaited<ReturnType<typeof questionQueue>>;

/**
 * The request's questions, handed out in order to whichever slot asks next; their answers and
 * tokens. `tiled`: each slot cut back after a question where that helps (tiles.ts); not with images,
 * whose prompts are no tokens alone, nor with a template applied to each question, whose prompts
 * share no start known here.
 */
async function questionQueue(runner: RunnerCalls, ask: Ask, tiled: boolean) {
  const [forms, templated, mark] = await Promise.all([labelForms(runner, ask.questions), prompter(runner, ask.input, ask.questions[0]!), hasMedia(ask) ? runnerMark(runner) : undefined]);
  const prompt: Prompter = mark === undefined ? templated.prompt : async (question) => withRunnerMarks(await templated.prompt(question), mark);
  const cuts: Tiles | undefined = tiled && mark === undefined && templated.start !== undefined ? tiles(await promptTokens(runner, templated.start)) : undefined;
  const answers: Answer[] = [];
  const usage: Usage = { input: 0, cached: 0, output: 0 };
  let next = 0;
  return {
    answers,
    usage,
    cuts,
    done: () => next >= ask.questions.length,
    /** Asks the next question in `worker`'s slot; undefined when none is left. */
    async askNext(worker: Worker): Promise<Asked | undefined> {
      if (next >= ask.questions.length) return undefined;
      const i = next++;
      const asked = await askOne(worker.runner, ask, ask.questions[i]!, prompt, forms, worker.slot);
      answers[i] = asked.answer;
      if (asked.timings) {
        usage.input += asked.timings.prompt_n + asked.timings.cache_n;
        usage.cached += asked.timings.cache_n;
        usage.output += asked.timings.predicted_n;
      }
      const cut = next < ask.questions.length && asked.slot !== undefined ? cuts?.cutAfter(asked.prompt, worker.kept) : undefined;
      // Its own work, not the question's: not counted.
      if (cut) await cutSlot(worker.runner, asked.slot!, cut);
      worker.kept = cut?.length;
      return asked;
    },
  };
}

async function drain(queue: Queue, worker: Worker): Promise<void> {
  while (await queue.askNext(worker));
}

type Seeding = { lead: Worker; extra: ReturnType<typeof leasePool>; queue: Queue; workers: Worker[]; stop: AbortSignal };

/**
 * The runner's other slots given the input, one after the other, each with a lease granted by now
 * and its first question (see the top of this file); each joins `workers`. The last to join is one
 * that had to process the input again, unless the input is short.
 */
async function seed(run: SlotRun, ask: Ask, { lead, extra, queue, workers, stop }: Seeding): Promise<void> {
  if (lead.slot === undefined || queue.done() || !extra.waiting()) return;
  const inputTokens = queue.cuts?.start.length ?? (await templatedInputTokens(lead.runner, ask.input));
  for (let slot = 0; slot < run.slots; slot++) {
    if (slot === lead.slot) continue;
    const lease = queue.done() ? undefined : extra.take();
    if (!lease) return;
    const seeded: Worker = { ...worker(run, lease, stop), slot };
    workers.push(seeded);
    await seeded.ready;
    await clearSlot(seeded.runner, slot);
    const asked = await queue.askNext(seeded);
    // From the cache: the input but its end (what a cut left, the seam) was found there.
    const fromCache = (asked?.timings?.cache_n ?? 0) + SEAM_TOKENS + TILE_TOKENS >= inputTokens;
    if (!fromCache && inputTokens > SHORT_INPUT_TOKENS) return;
  }
}

/**
 * A leased runner's calls under the request's signals; released once. `ready`: what the scheduler
 * has the runner do before this lease's requests are sent (a slot being copied for agent sessions
 * is saved first: see src/scheduler/prefix-copies.ts).
 */
function worker(run: SlotRun, lease: Lease, stop: AbortSignal): Worker {
  const call = anySignal([run.request.signal, lease.died, stop]);
  const ready = Promise.resolve(lease.ready?.(call.signal)).then(() => lease.sending(false));
  return {
    runner: runnerCalls(lease, call.signal, run.model, run.request.signal, run.key),
    ready,
    release: () => (call.dispose(), lease.release()),
  };
}

/**
 * Up to `want` more leases, asked for at once: `take` hands out one granted by now (never waits
 * for one); `close` gives back those not taken and stops waiting for the rest.
 */
function leasePool(run: SlotRun, want: number, stop: AbortSignal) {
  const granted: Lease[] = [];
  const waiting = anySignal([run.request.signal, stop]);
  let open = want;
  let closed = false;
  for (let i = 0; i < want; i++) {
    run.acquire(waiting.signal).then(
      (lease) => (closed ? lease.release() : granted.push(lease)),
      () => {}, // not granted (a full queue, the request over): one slot fewer
    ).finally(() => open--);
  }
  return {
    waiting: () => granted.length > 0 || open > 0,
    take: () => granted.shift(),
    close() {
      if (closed) return;
      closed = true;
      waiting.abort(undefined);
      waiting.dispose();
      for (const lease of granted.splice(0)) lease.release();
    },
  };
}
