import { HttpError } from "../http/errors.ts";

// llama-server turns a Responses `input` into chat messages itself, and fails the whole request
// with an opaque 400 ("Cannot determine type of 'item'") on any item it does not know. Codex sends
// such items once a turn has called its freeform apply_patch tool (a `custom_tool_call` and its
// output), and other clients send reasoning without text or object arguments. So each item
// is rewritten here into one llama-server takes, with its meaning kept; what cannot be is refused
// by its index and type. Pure: items in, items out.
//
// What llama-server takes: a message (user/system/developer with input_text/input_image/input_file
// parts, or assistant with output_text parts), a function_call (string arguments), a
// function_call_output (string output, or input_text parts), a reasoning item whose `content`
// starts with a text.

type Item = Record<string, unknown>;

const isObject = (value: unknown): value is Item => typeof value === "object" && value !== null && !Array.isArray(value);
const textOf = (part: unknown): string | undefined => {
  if (!isObject(part)) return undefined;
  if (typeof part.text === "string") return part.text;
  return typeof part.refusal === "string" ? part.refusal : undefined;
};
const asJson = (value: unknown) => (typeof value === "string" ? value : JSON.stringify(value ?? {}));

class Unmappable extends Error {}

/** An item's type; one without, but with a role, is a message (the Responses API's short form). */
const typeOf = (item: Item) => item.type ?? (item.role !== undefined ? "message" : undefined);

/** The items to send for a request's `input`; a string input is left as it is. */
export function servableInput(input: unknown): unknown {
  if (!Array.isArray(input)) return input;
  return input.flatMap((item: unknown, index) => {
    try {
      return servableItem(item);
    } catch (error) {
      if (!(error instanceof Unmappable)) throw error;
      const type = isObject(item) ? String(typeOf(item) ?? "untyped") : Array.isArray(item) ? "array" : typeof item;
      throw new HttpError(400, "invalid_request_error", "unsupported_input_item", `input[${index}] (${type}): ${error.message}`);
    }
  });
}

/** One input item as zero or more items llama-server takes. */
function servableItem(item: unknown): Item[] {
  if (!isObject(item)) throw new Unmappable("an input item must be an object");
  const type = typeOf(item);
  switch (type) {
    case "message":
      return message(item);
    case "function_call":
      return [{ type, call_id: item.call_id, name: item.name, arguments: asJson(item.arguments) }];
    case "function_call_output":
    case "custom_tool_call_output":
    case "local_shell_call_output":
      return [{ type: "function_call_output", call_id: item.call_id, output: toolOutput(item.output) }];
    case "custom_tool_call":
      // A freeform tool's raw input, given to the model as the one argument it stands for.
      return [{ type: "function_call", call_id: item.call_id, name: item.name, arguments: JSON.stringify({ input: item.input ?? "" }) }];
    case "local_shell_call": {
      const action = isObject(item.action) ? item.action : {};
      const { type: _, ...args } = action;
      return [{ type: "function_call", call_id: item.call_id ?? item.id, name: "local_shell", arguments: JSON.stringify(args) }];
    }
    case "reasoning":
      return reasoning(item);
    default:
      throw new Unmappable(type === undefined ? "an item needs a type" : `items of type "${String(type)}" cannot be sent to the model`);
  }
}

/** A message with parts of the kinds its role may carry: assistant text as output_text, the rest as input parts. */
function message(item: Item): Item[] {
  const role = item.role;
  if (role !== "assistant" && role !== "user" && role !== "system" && role !== "developer") throw new Unmappable(`a message's role must be user, system, developer or assistant, not "${String(role)}"`);
  const parts = typeof item.content === "string" ? [{ type: role === "assistant" ? "output_text" : "input_text", text: item.content }] : item.content;
  if (!Array.isArray(parts)) throw new Unmappable("a message's content must be a string or an array of parts");
  const content = parts.flatMap((part: unknown) => (role === "assistant" ? assistantPart(part) : inputPart(part)));
  // An assistant turn with nothing left to say is no turn: llama-server would render it empty.
  if (role === "assistant" && content.length === 0) return [];
  return [{ type: "message", role, content }];
}

function assistantPart(part: unknown): Item[] {
  const text = textOf(part);
  if (text === undefined) throw new Unmappable("an assistant message's parts must carry text");
  return [{ type: "output_text", text }];
}

function inputPart(part: unknown): Item[] {
  if (isObject(part) && (part.type === "input_image" || part.type === "input_file")) return [part];
  const text = textOf(part);
  if (text === undefined) throw new Unmappable(`a message part of type "${String(isObject(part) ? part.type : typeof part)}" cannot be sent to the model`);
  return [{ type: "input_text", text }];
}

/**
 * A tool's output as llama-server takes it: a string, or input_text parts (other parts' text kept,
 * the rest as JSON). Images and files stay what they are: the media checks see them as they see a
 * message's (a URL refused there is never turned into text that slips past them).
 */
function toolOutput(output: unknown): unknown {
  if (typeof output === "string") return output;
  if (!Array.isArray(output)) return asJson(output);
  return output.map((part: unknown) =>
    isObject(part) && (part.type === "input_image" || part.type === "input_file") ? part : { type: "input_text", text: textOf(part) ?? JSON.stringify(part) },
  );
}

/**
 * Reasoning with its text kept: its content if it has some, else its summary's text; with neither
 * (OpenAI's own reasoning comes as a summary and encrypted content, which no local model can read)
 * it is dropped.
 */
function reasoning(item: Item): Item[] {
  const content = Array.isArray(item.content) ? item.content.flatMap((part: unknown) => textOf(part) ?? []) : [];
  const summary = Array.isArray(item.summary) ? item.summary.flatMap((part: unknown) => textOf(part) ?? []) : [];
  const texts = content.length > 0 ? content : summary;
  if (texts.length === 0) return [];
  return [{ type: "reasoning", summary: summary.map((text) => ({ type: "summary_text", text })), content: texts.map((text) => ({ type: "reasoning_text", text })) }];
}
