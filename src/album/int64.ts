import * as z from "zod";

// Album and photo ids are signed 64-bit integers. JavaScript numbers are exact only up to 2^53,
// so ids travel as decimal strings (canonical form of a bigint) and are never turned into numbers.

const MIN = -(2n ** 63n);
const MAX = 2n ** 63n - 1n;

export const inInt64Range = (value: bigint) => value >= MIN && value <= MAX;

/** A path parameter: optional sign and digits, within range; gives the canonical decimal form. */
export const Int64Param = z
  .string()
  .regex(/^[+-]?\d{1,25}$/, "must be a 64-bit integer")
  .transform((text) => BigInt(text))
  .refine(inInt64Range, "must be within the signed 64-bit range")
  .transform((value) => value.toString());

/** Reads a JSON text, keeping every integer under the key `id` exact, as a bigint. */
export function parseJsonWithExactIds(text: string): unknown {
  return JSON.parse(text, function (key, value, context?: { source?: string }) {
    if (key === "id" && typeof value === "number" && context?.source && /^-?\d+$/.test(context.source)) {
      return BigInt(context.source);
    }
    return value;
  });
}
