// llama-server refuses a prompt longer than a slot's context with 400 exceed_context_size_error,
// "request (N tokens) exceeds the available context size (M tokens), try increasing it". Coding
// agents read those words as "the conversation grew too long": they summarise it and send it
// again. Where the conversation has no earlier turn, that cannot help (the system prompt and the
// tools alone do not fit), and an agent that retries after each summary never ends (opencode
// 1.18.33 did, hundreds of times a minute). Such a refusal is said again in words no agent takes
// for an overflow it can compact away, naming the setting that fixes it; any other is left as it came.

type Refusal = { error?: { type?: string; n_prompt_tokens?: number; n_ctx?: number } };

/** The chat dialects' paths, whose bodies hold a conversation (Anthropic's Messages come as chats). */
const CONVERSATIONS = new Set(["/v1/chat/completions", "/v1/responses"]);

/** Items of a conversation that only come after the model's first answer. */
const LATER_ITEMS = new Set(["function_call", "function_call_output", "custom_tool_call", "custom_tool_call_output", "reasoning"]);

/** Whether a request's conversation holds an answer of the model already (or a tool's result). */
function hasEarlierTurns(body: Uint8Array): boolean {
  let parsed: { messages?: unknown; input?: unknown };
  try {
    parsed = JSON.parse(new TextDecoder().decode(body)) as typeof parsed;
  } catch {
    return true; // not ours to judge
  }
  const items = Array.isArray(parsed.messages) ? parsed.messages : Array.isArray(parsed.input) ? parsed.input : [];
  return items.some((item: { role?: unknown; type?: unknown } | null) => item?.role === "assistant" || item?.role === "tool" || LATER_ITEMS.has(item?.type as string));
}

/**
 * llama-server's refusal of an opening prompt too long for the model's context, said as ours
 * (OpenAI's envelope, which each dialect reshapes as it does llama-server's errors); undefined for
 * any other answer.
 */
export function openingTooLong(model: string, path: string, body: Uint8Array, answer: Uint8Array): Uint8Array<ArrayBuffer> | undefined {
  if (!CONVERSATIONS.has(path)) return undefined;
  let refusal: Refusal;
  try {
    refusal = JSON.parse(new TextDecoder().decode(answer)) as Refusal;
  } catch {
    return undefined;
  }
  const { type, n_prompt_tokens: tokens, n_ctx: context } = refusal.error ?? {};
  if (type !== "exceed_context_size_error" || typeof tokens !== "number" || typeof context !== "number" || hasEarlierTurns(body)) return undefined;
  const message =
    `${model} holds ${context} tokens per request, and this conversation's opening request (its system prompt, tools and first message) is ${tokens}: ` +
    `leaving out earlier turns cannot make it fit. Give the model a larger context (\`llamadock configure ${model} --context-size N\`, shared by its slots) and start again`;
  return new TextEncoder().encode(JSON.stringify({ error: { message, type, code: "context_too_small", n_prompt_tokens: tokens, n_ctx: context } }));
}
