import { Pool } from "undici";

/**
 * An undici dispatcher whose connections all go to `socketPath`. undici's default 300 s header
 * and body timeouts would cut a long generation (nothing is sent during prompt processing), so
 * both are off. A Pool, not an Agent: an Agent closes its pool for an origin whenever the pool's
 * last connection closes, and llama-server closes each one after a streamed answer, so under a
 * flow of streams a new Pool was made and torn down again and again (bench:inference, Node).
 */
export const unixDispatcher = (socketPath: string) =>
  new Pool("http://runner", { connect: { socketPath }, headersTimeout: 0, bodyTimeout: 0 });
