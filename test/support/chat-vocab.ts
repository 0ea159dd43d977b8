// The vocabulary and chat template of a model shaped as chat models people pull are: a GPT-2-style
// byte-level BPE vocabulary (`tokenizer.ggml.model = "gpt2"`), as llama.cpp reads Qwen's, Llama 3's
// and most others', and Qwen2.5-Instruct's chat template, verbatim: ChatML with a tools section,
// whose tool calls are `<tool_call>{"name": ..., "arguments": ...}</tool_call>`. llama-server's
// grammar sampler refuses JSON grammars on a vocabulary of byte tokens (`<0x41>`); it accepts this.

/** llama.cpp's token types. */
export const TOKEN_TYPE = { normal: 1, control: 3, userDefined: 4 } as const;

/**
 * GPT-2's bytes_to_unicode: each byte as one printable character (the printable ASCII and Latin-1
 * ones as themselves, the rest moved to U+0100 on), so a space is `Ġ` and a newline `Ċ`.
 */
export function byteCharacters(): string[] {
  const printable = (b: number) => (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff);
  const chars: string[] = [];
  let shifted = 0;
  for (let b = 0; b < 256; b++) chars.push(String.fromCodePoint(printable(b) ? b : 256 + shifted++));
  return chars;
}

/**
 * A few dozen merges, in rank order, of the pieces JSON and English are made of: enough that a
 * token often spans several characters (`{"`, `":`, `Ġthe`, `name`), which is what the grammar
 * sampler must handle on real vocabularies, and which a byte vocabulary never exercises.
 */
const MERGES = [
  "Ġ t", "h e", "i n", "e r", "o n", "a n", "r e", "Ġ a", "a t", "o r", "e s", "e n", "Ġ s", "i s", "i t", "a l",
  "Ġt he", "in g", "Ġ c", "Ġ w", "Ġ o", "Ġ f", "a m", "n am", "nam e", "a r", "u m", "g um", "ar gum", "en t",
  "argum ent", "argument s", "t o", "o l", "to ol", "c it", "cit y", "Ġ \"", "\" :", "{ \"", "\" ,", "\" }", "Ġ {",
  "Ġ [", "] }", "Ġ Ġ", "Ċ Ċ", "ĠĠ ĠĠ", "o u", "l e", "Ġ p", "Ġ m", "Ġ b", "Ġ d", "Ġ h", "Ġ i", "Ġ n", "Ġ l",
  "Ġ 1", "Ġ 0", "t r", "tr u", "tru e", "f al", "fal s", "fals e", "n u", "nu l", "nul l", "y p", "t yp", "typ e",
];

/** ChatML's markers, then the tool-call tags Qwen2.5 adds to its vocabulary. */
const SPECIAL: [string, number][] = [
  ["<|endoftext|>", TOKEN_TYPE.control],
  ["<|im_start|>", TOKEN_TYPE.control],
  ["<|im_end|>", TOKEN_TYPE.control],
  ["<tool_call>", TOKEN_TYPE.userDefined],
  ["</tool_call>", TOKEN_TYPE.userDefined],
];

export type ChatVocabulary = {
  tokens: string[];
  types: number[];
  merges: string[];
  /** Ids of the special tokens: end of text (also padding), and the end of a turn (end of generation). */
  endOfText: number;
  endOfTurn: number;
  /** What the model favours, by token id (see LEANING). */
  leaning: Lean<number>[];
};

/**
 * A token the model favours, always or only right after the token `after`: `by` weighs a hidden
 * unit that reads about 4 after the final norm, so its logit rises by about 4 times `by`.
 */
export type Lean<T = string> = { token: T; by: number; after?: T };

/**
 * What the model favours, as a model tuned for tools does when offered them: right after the
 * assistant's header (which ends in a newline) it opens a call, `<tool_call>` then a newline; after
 * a JSON object's last brace it closes the call; after `</tool_call>` it ends the turn; and it
 * leans a little towards ending a turn anywhere. llama-server's grammar for `tool_choice: "required"`
 * lets any text come before the first call: a model without these leans writes text until
 * max_tokens. All are bigrams but the last, so none applies inside a JSON string (no raw newline
 * there), where a favoured token would repeat until max_tokens.
 */
const LEANING: Lean[] = [
  { token: "<tool_call>", by: 4, after: "Ċ" },
  { token: "Ċ", by: 4, after: "<tool_call>" },
  ...["}", "\"}", "]}"].map((brace) => ({ token: "</tool_call>", by: 4, after: brace })),
  { token: "<|im_end|>", by: 4, after: "</tool_call>" },
  { token: "<|im_end|>", by: 1 },
];

/**
 * What a terse model favours instead: it ends its turn within a few tokens (the coding agents'
 * answers were one or two tokens long) and never opens a tool call. The coding agents' tests use
 * it: their tools are many and their arguments free strings, which random weights would fill for
 * hundreds of tokens at a long context's speed, and a call cut off by max_tokens is an error.
 * Right after the assistant's header it writes a letter first: it ended its turn there at once,
 * an empty answer, which Copilot CLI takes for a failed request ("No response was returned").
 */
const TERSE_LEANING: Lean[] = [
  { token: "<|im_end|>", by: 1.5 },
  { token: "<tool_call>", by: -4 },
  { token: "H", by: 6, after: "Ċ" },
];

/**
 * Bytes that never occur in UTF-8. llama-server v0.5.0's grammar sampler reads F5-FF as the first
 * byte of a 4-byte character, so a JSON string may take them, and its chat parser then refuses the
 * answer (500 "does not match the expected peg-native format"). A trained model all but never
 * samples them; the random one often does, so they are left out of its vocabulary.
 */
const NOT_UTF8 = (byte: number) => byte === 0xc0 || byte === 0xc1 || byte >= 0xf5;

/** The byte tokens (all but those never in UTF-8), one token per merge, then the special tokens. */
export function chatVocabulary(answers: "tool calls" | "terse" = "tool calls"): ChatVocabulary {
  const tokens = byteCharacters().filter((_, byte) => !NOT_UTF8(byte));
  for (const merge of MERGES) {
    const merged = merge.replace(" ", "");
    if (tokens.includes(merged)) throw new Error(`merge ${merge} makes a token twice`);
    tokens.push(merged);
  }
  const types: number[] = tokens.map(() => TOKEN_TYPE.normal);
  for (const [text, type] of SPECIAL) {
    tokens.push(text);
    types.push(type);
  }
  const id = (text: string) => tokens.indexOf(text);
  const leaning = (answers === "terse" ? TERSE_LEANING : LEANING).map(({ token, by, after }) => ({ token: id(token), by, ...(after === undefined ? {} : { after: id(after) }) }));
  return { tokens, types, merges: MERGES, endOfText: tokens.indexOf("<|endoftext|>"), endOfTurn: tokens.indexOf("<|im_end|>"), leaning };
}

/** Qwen2.5-7B-Instruct's chat template (tokenizer_config.json), as published. */
export const QWEN25_CHAT_TEMPLATE = `{%- if tools %}
    {{- '<|im_start|>system\\n' }}
    {%- if messages[0]['role'] == 'system' %}
        {{- messages[0]['content'] }}
    {%- else %}
        {{- 'You are Qwen, created by Alibaba Cloud. You are a helpful assistant.' }}
    {%- endif %}
    {{- "\\n\\n# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\nYou are provided with function signatures within <tools></tools> XML tags:\\n<tools>" }}
    {%- for tool in tools %}
        {{- "\\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\\n<tool_call>\\n{\\"name\\": <function-name>, \\"arguments\\": <args-json-object>}\\n</tool_call><|im_end|>\\n" }}
{%- else %}
    {%- if messages[0]['role'] == 'system' %}
        {{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}
    {%- else %}
        {{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\\n' }}
    {%- endif %}
{%- endif %}
{%- for message in messages %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) or (message.role == "assistant" and not message.tool_calls) %}
        {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}
    {%- elif message.role == "assistant" %}
        {{- '<|im_start|>' + message.role }}
        {%- if message.content %}
            {{- '\\n' + message.content }}
        {%- endif %}
        {%- for tool_call in message.tool_calls %}
            {%- if tool_call.function is defined %}
                {%- set tool_call = tool_call.function %}
            {%- endif %}
            {{- '\\n<tool_call>\\n{"name": "' }}
            {{- tool_call.name }}
            {{- '", "arguments": ' }}
            {{- tool_call.arguments | tojson }}
            {{- '}\\n</tool_call>' }}
        {%- endfor %}
        {{- '<|im_end|>\\n' }}
    {%- elif message.role == "tool" %}
        {%- if (loop.index0 == 0) or (messages[loop.index0 - 1].role != "tool") %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\\n<tool_response>\\n' }}
        {{- message.content }}
        {{- '\\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}
            {{- '<|im_end|>\\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\\n' }}
{%- endif %}
`;
