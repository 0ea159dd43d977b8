import type { RunnerProcess } from "../scheduler/types.ts";

// llama-server's slot API (`POST /slots/N?action=save|restore`, files named within its
// --slot-save-path): only we call it, never a client (src/inference/body-policy.ts).

/** Saves or restores one slot: whether it was done, llama-server's words (cut), and the tokens it saved. */
export async function slotAction(runner: RunnerProcess, slot: number, action: "save" | "restore", filename: string, signal?: AbortSignal) {
  const response = await runner.fetch(`http://runner/slots/${slot}?action=${action}`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ filename }),
    ...(signal ? { signal } : {}),
  });
  const text = await response.text();
  const saved = response.ok ? Number((JSON.parse(text) as { n_saved?: number }).n_saved ?? 0) : 0;
  return { ok: response.ok, text: text.slice(0, 200), saved };
}
