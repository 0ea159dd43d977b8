import { Ajv } from "ajv";
import type { TinyGgufOptions } from "./tiny-gguf.ts";

// What the structured-output and tool tests share: the chat model's shape (a BPE vocabulary and a
// tool-calling template, see chat-vocab.ts), small schemas whose JSON the grammar closes within a
// few hundred tokens even on random weights (enums, short strings), and a real validator.

export const CHAT_MODEL: TinyGgufOptions = { vocabulary: "bpe", seed: 1 };

/**
 * An answer's shape: one of three colours and a word of one to eight lower-case letters. A pattern,
 * not maxLength: llama-server's grammar counts code points as it decodes a token's bytes without
 * checking that the bytes after a lead byte are continuation bytes (src/llama-grammar.cpp,
 * decode_utf8), so random weights can emit a lead byte and two ASCII characters as one "character"
 * that decodes to three (U+FFFD and the two): a word within maxLength by the grammar's count was
 * once eleven characters long. Bytes a-z are one character either way.
 */
export const COLOR_SCHEMA = {
  type: "object",
  properties: {
    color: { type: "string", enum: ["red", "green", "blue"] },
    word: { type: "string", pattern: "^[a-z]{1,8}$" },
  },
  required: ["color", "word"],
  additionalProperties: false,
};

/** Two tools, so that naming one can be told from the model's own pick. */
export const WEATHER_PARAMETERS = {
  type: "object",
  properties: { city: { type: "string", enum: ["Paris", "Oslo"] }, unit: { type: "string", enum: ["c", "f"] } },
  required: ["city", "unit"],
  additionalProperties: false,
};
export const TIME_PARAMETERS = {
  type: "object",
  properties: { zone: { type: "string", enum: ["utc", "cet"] } },
  required: ["zone"],
  additionalProperties: false,
};
export const TOOL_PARAMETERS: Record<string, object> = { get_weather: WEATHER_PARAMETERS, get_time: TIME_PARAMETERS };

/**
 * Room enough for the grammar to close: on random weights a free JSON object's strings run long
 * (up to 800 tokens in 80 tries), an enum-bound object or a tool call ends within 150.
 */
export const ROOM = 2000;

const ajv = new Ajv({ allErrors: true });

/** Why `value` does not fit `schema` (Ajv's words), or undefined when it fits. */
export function misfit(schema: object, value: unknown): string | undefined {
  const validate = ajv.compile(schema);
  return validate(value) ? undefined : ajv.errorsText(validate.errors);
}

/** `text` parsed as JSON, and why it does not fit `schema` (undefined when it fits). */
export function parsedMisfit(schema: object, text: string | null | undefined): string | undefined {
  let value: unknown;
  try {
    value = JSON.parse(text ?? "");
  } catch {
    return `not JSON: ${JSON.stringify(text)}`;
  }
  return misfit(schema, value);
}
