// Anthropic's Messages request as an OpenAI chat completion, the body llama-server's slot machinery
// can address (`id_slot`, `cache_prompt`: its own Messages translation drops both). Pure: a body in,
// a body out. What it maps:
// - `system` (a string or text blocks) -> one leading system message;
// - each message's blocks: text -> text parts; image (base64 or url) -> image_url parts;
//   thinking -> the assistant's reasoning_content (redacted thinking has no text to give);
//   tool_use -> the assistant's tool_calls; tool_result -> a tool message each, before the rest
//   of that user message (OpenAI's order: a call's results follow it);
// - tools -> functions; tool_choice auto/any/tool/none -> auto/required/the one function/none;
//   disable_parallel_tool_use -> parallel_tool_calls: false;
// - stop_sequences -> stop; thinking `enabled` -> llama-server's thinking_budget_tokens;
//   metadata.user_id -> `user` (the session, as chat names one);
// - every other field (llama-server's sampling options, `chat_template_kwargs`) as it came, but the
//   Anthropic fields that mean nothing to a chat completion.
// Claude Code's billing header (`x-anthropic-billing-header: …; cch=xxxxx;`) changes its `cch` on
// every request: it is made constant, or no turn would ever reuse the prompt after it.

type Json = Record<string, unknown>;
type Block = Json & { type?: unknown };

const isObject = (value: unknown): value is Json => typeof value === "object" && value !== null && !Array.isArray(value);
const text = (value: unknown) => (typeof value === "string" ? value : "");

/** Anthropic's own fields, translated below or meaningless to llama-server: never passed on as they are. */
const ANTHROPIC_FIELDS = new Set([
  "system", "messages", "tools", "tool_choice", "stop_sequences", "thinking", "metadata",
  "service_tier", "container", "mcp_servers", "context_management", "betas", "anthropic_version",
]);

/** The chat completion body for a Messages body (checked for its shape before: model, messages, max_tokens). */
export function chatRequest(body: Json): Json {
  const chat: Json = {};
  for (const [key, value] of Object.entries(body)) if (!ANTHROPIC_FIELDS.has(key)) chat[key] = value;
  chat.messages = [...systemMessages(body.system), ...(body.messages as unknown[]).flatMap(chatMessages)];
  if (Array.isArray(body.tools)) chat.tools = body.tools.filter(isObject).map(chatTool);
  Object.assign(chat, toolChoice(body.tool_choice));
  if (body.stop_sequences !== undefined) chat.stop = body.stop_sequences;
  const thinking = isObject(body.thinking) ? body.thinking : undefined;
  if (thinking?.type === "enabled" && typeof thinking.budget_tokens === "number") chat.thinking_budget_tokens = thinking.budget_tokens;
  const user = isObject(body.metadata) ? body.metadata.user_id : undefined;
  if (typeof user === "string" && user !== "" && chat.user === undefined) chat.user = user;
  if (chat.stream === true) {
    // The prompt's counts come with the first chunk (message_start says them) and the usage at the end.
    chat.stream_options = { include_usage: true };
    chat.timings_per_token = true;
  }
  return chat;
}

/** Claude Code's billing line with its per-request `cch` stamp made constant (llama-server does the same). */
export function steadyBillingHeader(system: string): string {
  if (!system.startsWith("x-anthropic-billing-header:")) return system;
  return system.replace(/(cch=)[0-9a-zA-Z]{5};/, "$1fffff;");
}

function systemMessages(system: unknown): Json[] {
  if (typeof system === "string") return system === "" ? [] : [{ role: "system", content: steadyBillingHeader(system) }];
  if (!Array.isArray(system)) return [];
  const blocks = system.filter((b): b is Block => isObject(b) && b.type === "text").map((b) => steadyBillingHeader(text(b.text)));
  return blocks.length === 0 ? [] : [{ role: "system", content: blocks.join("\n") }];
}

/** One Anthropic message as chat messages: the tool results it carries first, then the rest of it. */
function chatMessages(message: unknown): Json[] {
  if (!isObject(message)) return [];
  const role = message.role;
  const content = message.content;
  if (!Array.isArray(content)) return [{ role, content: typeof content === "string" ? content : "" }];
  const parts: Json[] = [];
  const calls: Json[] = [];
  const results: Json[] = [];
  let reasoning = "";
  for (const block of content.filter(isObject) as Block[]) {
    if (block.type === "text") parts.push({ type: "text", text: text(block.text) });
    else if (block.type === "image") {
      const url = imageUrl(block.source);
      if (url) parts.push({ type: "image_url", image_url: { url } });
    } else if (block.type === "thinking") reasoning += text(block.thinking);
    else if (block.type === "tool_use") calls.push({ id: text(block.id), type: "function", function: { name: text(block.name), arguments: JSON.stringify(block.input ?? {}) } });
    else if (block.type === "tool_result") results.push(toolResult(block));
  }
  const out = [...results];
  if (parts.length > 0 || calls.length > 0 || reasoning !== "") {
    const rest: Json = { role, content: parts.length === 0 ? "" : onlyText(parts) ?? parts };
    if (calls.length > 0) rest.tool_calls = calls;
    if (reasoning !== "") rest.reasoning_content = reasoning;
    out.push(rest);
  }
  return out;
}

/** Text parts alone as one string (what every chat template reads); undefined when an image is among them. */
function onlyText(parts: Json[]): string | undefined {
  return parts.every((p) => p.type === "text") ? parts.map((p) => p.text as string).join("\n") : undefined;
}

function imageUrl(source: unknown): string | undefined {
  if (!isObject(source)) return undefined;
  if (source.type === "base64") return `data:${text(source.media_type) || "image/jpeg"};base64,${text(source.data)}`;
  if (source.type === "url") return text(source.url) || undefined;
  return undefined;
}

/** A tool_result block as a tool message: its text (or its parts, with images), an error said as one. */
function toolResult(block: Block): Json {
  const content = block.content;
  let parts: Json[] = [];
  if (typeof content === "string") parts = [{ type: "text", text: content }];
  else if (Array.isArray(content)) {
    for (const c of content.filter(isObject) as Block[]) {
      if (c.type === "text") parts.push({ type: "text", text: text(c.text) });
      else if (c.type === "image") {
        const url = imageUrl(c.source);
        if (url) parts.push({ type: "image_url", image_url: { url } });
      }
    }
  }
  if (block.is_error === true) parts.unshift({ type: "text", text: "Error:" });
  return { role: "tool", tool_call_id: text(block.tool_use_id), content: onlyText(parts) ?? parts };
}

function chatTool(tool: Json): Json {
  const schema = isObject(tool.input_schema) ? tool.input_schema : { type: "object", properties: {} };
  return { type: "function", function: { name: text(tool.name), ...(typeof tool.description === "string" ? { description: tool.description } : {}), parameters: schema } };
}

function toolChoice(choice: unknown): Json {
  if (!isObject(choice)) return {};
  const parallel = choice.disable_parallel_tool_use === true ? { parallel_tool_calls: false } : {};
  if (choice.type === "auto") return { tool_choice: "auto", ...parallel };
  if (choice.type === "any") return { tool_choice: "required", ...parallel };
  if (choice.type === "none") return { tool_choice: "none" };
  if (choice.type === "tool") return { tool_choice: { type: "function", function: { name: text(choice.name) } }, ...parallel };
  return {};
}
