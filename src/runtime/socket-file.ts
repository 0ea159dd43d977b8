import { chmodSync, existsSync, mkdirSync, unlinkSync } from "node:fs";
import { connect } from "node:net";
import { dirname } from "node:path";

// No runtime removes its Unix socket file when killed, and none listens on a stale one; but a
// live socket must never be taken from a server that still runs. So: connect first, then unlink.

/**
 * Makes `path` ready to listen on: creates its folder, removes a socket file nobody answers on,
 * and throws if a live server owns it.
 */
export async function clearStaleSocket(path: string): Promise<void> {
  // A folder we create is the owner's alone: the socket is reachable through it only by the owner.
  mkdirSync(dirname(path), { recursive: true, mode: 0o700 });
  if (!existsSync(path)) return;
  if (await answers(path)) throw new Error(`address in use: ${path} (another server answers on it)`);
  removeSocket(path);
}

/**
 * The socket trusts its peer (no API key is asked on it), so only its owner may connect: read and
 * write for the owner, nothing for others. Called right after listening.
 */
export function ownerOnly(path: string): void {
  chmodSync(path, 0o600);
}

export function removeSocket(path: string): void {
  try {
    unlinkSync(path);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== "ENOENT") throw error;
  }
}

function answers(path: string): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connect(path);
    socket.once("connect", () => {
      socket.destroy();
      resolve(true);
    });
    socket.once("error", () => resolve(false));
  });
}
