import { Agent } from "undici";

/**
 * An undici dispatcher whose connections all go to `socketPath`. undici's default 300 s header
 * and body timeouts would cut a long generation (nothing is sent during prompt processing), so
 * both are off.
 */
export const unixDispatcher = (socketPath: string) =>
  new Agent({ connect: { socketPath }, headersTimeout: 0, bodyTimeout: 0 });
