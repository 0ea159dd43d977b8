import { insufficientStorage } from "../errors.ts";
import { formatSize } from "../gguf.ts";

/**
 * Refuses (507 insufficient_storage, before a byte is downloaded) a pull of `what` that needs
 * `needed` more bytes than the `store`'s filesystem has `free`. Free space unknown (Deno without
 * `--allow-sys=statfs`): nothing is refused. Model and engine pulls share it.
 */
export function refuseWithoutRoom(what: string, needed: number, free: number | undefined, store: string): void {
  if (needed === 0 || free === undefined || needed <= free) return;
  throw insufficientStorage(`not enough free space to pull ${what}: it needs ${formatSize(needed)} more, the ${store} has ${formatSize(free)} free`);
}
