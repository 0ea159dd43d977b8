import * as z from "zod";

// Album and photo ids are signed 64-bit integers; JavaScript numbers are exact only up to 2^53.
// The path's albumId travels as its canonical decimal text, turned into a number only when exact.
// A photo id stays a number when it is a safe integer (nearly always, and the cheapest to read
// and write) and is read as a bigint otherwise, then written back digit for digit by rawJSON.

const MIN = -(2n ** 63n);
const MAX = 2n ** 63n - 1n;

export const inInt64Range = (value: bigint) => value >= MIN && value <= MAX;

// Part of the JSON source-text proposal, shipped by V8 (Node, Deno) and JavaScriptCore (Bun).
const rawJSON = (JSON as unknown as { rawJSON(text: string): object }).rawJSON;

/** What a 64-bit integer looks like as text, before its range is checked: optional sign, digits. */
export const INT64_TEXT = /^[+-]?\d{1,25}$/;

/** A path parameter: optional sign and digits, within range; gives the canonical decimal form. */
const Int64Text = z
  .string()
  .regex(INT64_TEXT, "must be a 64-bit integer")
  .transform((text) => BigInt(text))
  .refine(inInt64Range, "must be within the signed 64-bit range")
  .transform((value) => value.toString());

/** Up to 18 digits, no leading zero, no plus, no "-0": canonical and within range already. */
const CANONICAL_SHORT = /^(?:0|-?[1-9]\d{0,17})$/;

/**
 * The album id of a path, as canonical decimal text, or undefined when it is not a signed 64-bit
 * integer. Nearly every id is short and canonical, and is taken as it is; the rest go through the
 * schema (sign, leading zeros, range), which costs a BigInt and several checks per request.
 */
export function int64Param(text: string): string | undefined {
  if (CANONICAL_SHORT.test(text)) return text;
  const parsed = Int64Text.safeParse(text);
  return parsed.success ? parsed.data : undefined;
}

/** An integer's digits, which JSON.stringify (and Response.json) writes as they are: exact past 2^53. */
export const exactInteger = (digits: string): object => rawJSON(digits);

/** An id read by `parseJsonWithExactIds`; its output goes through JSON.stringify exactly. */
export const Int64Json = z.union([
  z.int(),
  z.bigint().refine(inInt64Range).transform((value) => exactInteger(value.toString())),
]);

/**
 * Reads a JSON text in which every `id` is exact: a safe integer as a number, a larger integer as
 * a bigint. An id is an integer by its value, as JSON Schema's `integer` is (1.0 and 1e3 are the
 * integers 1 and 1000); one past 2^53 is read digit for digit, so it must be written as digits.
 * Source-text access costs about eight times a plain parse: callers try `JSON.parse` first.
 */
export function parseJsonWithExactIds(text: string): unknown {
  return JSON.parse(text, exactId);
}

/** Integers past 2^53 written as digits become bigints; any other number stays as parsed (validation refuses non-integers). */
function exactId(key: string, value: unknown, context?: { source?: string }): unknown {
  if (key !== "id" || typeof value !== "number" || Number.isSafeInteger(value) || context?.source === undefined) return value;
  return /^-?\d+$/.test(context.source) ? BigInt(context.source) : value;
}
