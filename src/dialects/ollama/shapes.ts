// The bodies Ollama's /api routes take, and the OpenAI answers llama-server gives that translate.ts
// turns back into Ollama's shapes.

export type OllamaMessage = {
  role: string;
  content?: string;
  images?: string[];
  thinking?: string;
  tool_calls?: { id?: string; function: { index?: number; name: string; arguments: Record<string, unknown> | string } }[];
  tool_name?: string;
  tool_call_id?: string;
};

export type OllamaOptions = Record<string, unknown>;

export type OllamaChat = {
  model: string;
  messages?: OllamaMessage[];
  tools?: unknown[];
  format?: unknown;
  options?: OllamaOptions;
  think?: boolean | string;
  stream?: boolean;
  logprobs?: boolean;
  top_logprobs?: number;
};

export type OllamaGenerate = {
  model: string;
  prompt?: string;
  suffix?: string;
  system?: string;
  images?: string[];
  raw?: boolean;
  format?: unknown;
  options?: OllamaOptions;
  think?: boolean | string;
  stream?: boolean;
};

export type OpenAIToolCall = { id?: string; type?: string; index?: number; function?: { name?: string; arguments?: string } };
export type OpenAIMessage = { role?: string; content?: string | null; reasoning_content?: string | null; tool_calls?: OpenAIToolCall[] };
export type Timings = { cache_n?: number; prompt_n?: number; prompt_ms?: number; predicted_n?: number; predicted_ms?: number };
export type Usage = { prompt_tokens?: number; completion_tokens?: number; prompt_tokens_details?: { cached_tokens?: number } };
export type OpenAIAnswer = {
  choices?: { message?: OpenAIMessage; delta?: OpenAIMessage; text?: string; finish_reason?: string | null }[];
  usage?: Usage;
  timings?: Timings;
  error?: { message?: string };
};
