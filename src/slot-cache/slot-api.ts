import { textAtMost } from "../http/body.ts";
import type { RunnerProcess } from "../scheduler/types.ts";

// llama-server's slot API (`POST /slots/N?action=save|restore`, files named within its
// --slot-save-path): only we call it, never a client (src/inference/body-policy.ts).

/** How long one save or restore may take by default: a few MiB to a few GiB written or read at disk speed. */
const SLOT_ACTION_TIMEOUT_MS = 60_000;

/** llama-server's answer is a line of JSON (the slot, the file, its tokens and time): far less than this. */
const ANSWER_LIMIT = 64 << 10;

type SlotAction = { ok: boolean; text: string; saved: number };

/** Saves or restores one slot: whether it was done, llama-server's words (cut), and the tokens it saved. */
export async function slotAction(runner: RunnerProcess, slot: number, action: "save" | "restore", filename: string, signal: AbortSignal = AbortSignal.timeout(SLOT_ACTION_TIMEOUT_MS)): Promise<SlotAction> {
  const response = await runner.fetch(`http://runner/slots/${slot}?action=${action}`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ filename }),
    signal,
  });
  const text = await textAtMost(response, ANSWER_LIMIT, () => new Error(`llama-server answered a slot ${action} with more than ${ANSWER_LIMIT >> 10} KiB`));
  const saved = response.ok ? Number((JSON.parse(text) as { n_saved?: number }).n_saved ?? 0) : 0;
  return { ok: response.ok, text: text.slice(0, 200), saved };
}

/** slotAction, with a runner that could not be reached (or the deadline) answered as a refusal in its words. */
export const trySlotAction = (...args: Parameters<typeof slotAction>): Promise<SlotAction> =>
  slotAction(...args).catch((error: Error) => ({ ok: false, text: error.message, saved: 0 }));
