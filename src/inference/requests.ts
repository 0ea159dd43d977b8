import * as z from "zod";
import { validBody } from "../http/body.ts";
import type { Mode } from "../scheduler/types.ts";

// The shapes we check before loading anything. Only what we need is checked; every other field
// (sampling options, tools, response_format...) passes through untouched to llama-server.

const model = z.string({ error: "model is required" }).trim().min(1, "model is required");

const Message = z.looseObject({
  role: z.string({ error: "each message needs a role" }).min(1),
  content: z.union([z.string(), z.array(z.unknown()), z.null()], { error: "content must be a string or an array of parts" }).optional(),
});

const tokens = z.array(z.number().int());
const textOrTokens = z.union([z.string(), z.array(z.string()), tokens, z.array(tokens)]);

const Chat = z.looseObject({ model, messages: z.array(Message, { error: "messages must be an array" }).min(1) });
/** A chat's shape (also what an Anthropic count_tokens body must have). */
export const CHAT_SCHEMA = Chat;
const Completion = z.looseObject({ model, prompt: textOrTokens });
const Embedding = z.looseObject({ model, input: textOrTokens });
// Anthropic's Messages API, checked in its own terms before its dialect translates it into a chat.
export const MESSAGES_SCHEMA = Chat.extend({ max_tokens: z.number({ error: "max_tokens is required" }).int().positive() });

// OpenAI's Responses API: a string or a list of input items.
const Responses = z.looseObject({ model, input: z.union([z.string(), z.array(z.unknown()).min(1)], { error: "input must be a string or an array of items" }) });

// Rerank (Jina/Cohere shape, as llama-server and DMR take it; `texts` is TEI's name for documents).
const texts = z.array(z.string({ error: "each document must be a string" }), { error: "documents must be an array of strings" }).min(1, "documents must not be empty");
const Rerank = z
  .looseObject({
    model,
    query: z.string({ error: "query must be a string" }),
    documents: texts.optional(),
    texts: texts.optional(),
    top_n: z.number({ error: "top_n must be a positive integer" }).int().positive().optional(),
  })
  .refine((body) => body.documents !== undefined || body.texts !== undefined, { message: "documents is required", path: ["documents"] });

// llama-server's token counting, for clients that count tokens.
const Tokenize = z.looseObject({ model, content: z.string({ error: "content must be a string" }) });
const Detokenize = z.looseObject({ model, tokens: tokens });

export type Endpoint =
  | "chat/completions"
  | "completions"
  | "embeddings"
  | "chat/completions/input_tokens"
  | "responses"
  | "rerank"
  | "tokenize"
  | "detokenize";

/** Each endpoint: the runner mode it needs, the shape checked, and its path on llama-server (default `/v1/<endpoint>`). */
export const ENDPOINTS: Record<Endpoint, { mode: Mode; schema: z.ZodType<{ model: string }>; path?: string }> = {
  "chat/completions": { mode: "completion", schema: Chat },
  completions: { mode: "completion", schema: Completion },
  embeddings: { mode: "embedding", schema: Embedding },
  // llama-server's count of a chat's prompt (Anthropic's count_tokens, translated, asks it).
  "chat/completions/input_tokens": { mode: "completion", schema: Chat },
  responses: { mode: "completion", schema: Responses },
  rerank: { mode: "reranking", schema: Rerank },
  tokenize: { mode: "completion", schema: Tokenize, path: "/tokenize" },
  detokenize: { mode: "completion", schema: Detokenize, path: "/detokenize" },
};

/** The endpoints of OpenAI's API (the others belong to a dialect's own routes). */
export const OPENAI_ENDPOINTS: Endpoint[] = ["chat/completions", "completions", "embeddings"];

/** The model a valid body asks for. */
export const requestedModel = (endpoint: Endpoint, body: unknown): string => validBody(ENDPOINTS[endpoint].schema, body).model;
