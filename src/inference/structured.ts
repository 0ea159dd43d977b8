import { badRequest } from "../http/errors.ts";
import { hangingRepetition } from "./grammar-pattern.ts";
import { schemaProblem } from "./json-schema.ts";
import type { Endpoint } from "./requests.ts";

// Structured output and tools, as llama-server reads them from a body: every JSON schema it would
// turn into a grammar (response formats, tool parameters) is checked first (json-schema.ts), and a
// tool_choice that names one function, which llama-server reads as "auto", becomes "required" over
// that function alone. Pure: a body in, the body to send out (or the same body), or a 400.

type Body = Record<string, unknown>;
type Tool = Record<string, unknown>;
type Found = { where: string; schema: unknown; strict: boolean };

const isObject = (value: unknown): value is Body => typeof value === "object" && value !== null && !Array.isArray(value);
const objects = (value: unknown): Body[] => (Array.isArray(value) ? value.filter(isObject) : []);

/** The body to forward: checked, and with a named tool_choice made one llama-server obeys. */
export function structuredRequest(endpoint: Endpoint, body: unknown): unknown {
  if (!isObject(body)) return body;
  for (const { where, schema, strict } of schemas(endpoint, body)) {
    const problem = schemaProblem(schema, strict);
    if (problem) throw badRequest("invalid_schema", `${where}: ${problem.message} (at ${problem.path})`);
  }
  if (typeof body.grammar === "string") {
    const repetition = hangingRepetition(body.grammar);
    if (repetition) throw badRequest("invalid_grammar", `grammar: the repetition ${repetition} has a minimum above its maximum`);
  }
  return namedToolChoice(endpoint, body) ?? body;
}

/** Each schema a body carries, where it is, and whether it asks to be held strictly. */
function schemas(endpoint: Endpoint, body: Body): Found[] {
  const found: Found[] = [];
  const format = body.response_format;
  if (isObject(format) && format.type === "json_schema" && isObject(format.json_schema) && "schema" in format.json_schema) {
    found.push({ where: "response_format.json_schema.schema", schema: format.json_schema.schema, strict: format.json_schema.strict === true });
  }
  if (isObject(format) && format.type === "json_object" && "schema" in format) found.push({ where: "response_format.schema", schema: format.schema, strict: false });
  if ("json_schema" in body && body.json_schema !== null) found.push({ where: "json_schema", schema: body.json_schema, strict: false });
  objects(body.tools).forEach((tool, i) => {
    // OpenAI chat nests a function; Responses does not.
    const fn = isObject(tool.function) ? tool.function : tool;
    if (fn.parameters === undefined) return;
    const where = endpoint === "chat/completions" ? `tools[${i}].function.parameters` : `tools[${i}].parameters`;
    found.push({ where, schema: fn.parameters, strict: fn.strict === true });
  });
  return found;
}

const toolName = (tool: Tool) => (isObject(tool.function) ? tool.function.name : tool.name);

/**
 * A tool_choice naming one function: OpenAI chat's {type: "function", function: {name}} (Anthropic's
 * {type: "tool", name}, translated), the Responses API's {type: "function", name}. llama-server
 * reads them as "auto": so only the named tool is offered, and a call is required.
 */
function namedToolChoice(endpoint: Endpoint, body: Body): Body | undefined {
  const choice = body.tool_choice;
  if (!isObject(choice)) return undefined;
  const name = choice.type === "function" ? (isObject(choice.function) ? choice.function.name : choice.name) : undefined;
  if (typeof name !== "string") return undefined;
  const tools = objects(body.tools).filter((tool) => toolName(tool) === name);
  if (tools.length === 0) throw badRequest("invalid_tool_choice", `tool_choice names the function "${name}", which is not among the tools`);
  return { ...body, tools, tool_choice: "required" };
}
