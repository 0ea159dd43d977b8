// The Responses API asks for structured output in `text.format`; llama-server's /v1/responses
// reads only chat completions' `response_format` and ignores `text`, so a schema asked for there
// was answered with free text (the Vercel AI SDK's generateObject, whose default OpenAI provider
// speaks Responses, failed on every call). Translated here, pure: a body in, the fields to add out.

type Body = Record<string, unknown>;

const isObject = (value: unknown): value is Body => typeof value === "object" && value !== null && !Array.isArray(value);

/** `text.format` as `response_format` (json_schema keeps its name, description, schema and strict). */
export function textFormatFields(body: Body): { response_format?: Body } {
  const format = isObject(body.text) ? body.text.format : undefined;
  if (!isObject(format)) return {};
  if (format.type === "json_object") return { response_format: { type: "json_object" } };
  if (format.type !== "json_schema") return {}; // "text": nothing to hold the answer to
  const { type: _, ...jsonSchema } = format;
  return { response_format: { type: "json_schema", json_schema: jsonSchema } };
}
