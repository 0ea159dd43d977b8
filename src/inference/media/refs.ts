// Where a request body carries media, in any dialect and at any depth: llama-server turns each of
// these into an image, audio or video input, and fetches the ones given by http(s) URL itself. So
// every one is found here, wherever a dialect nests it: OpenAI chat parts (`image_url`,
// `input_audio`, `input_video`/`video_url`, `file`), Responses items (`input_image`, `input_file`,
// also inside a `function_call_output`), Anthropic blocks (`image`, `document` sources, also inside
// a `tool_result`). Ollama's `images` arrive here already as chat parts (see translate.ts).

export type MediaKind = "image" | "audio" | "video" | "file";

/** One place a media value sits: `holder[key]` is a string (a URL, a data: URL or bare base64). */
export type MediaRef = { holder: Record<string, unknown>; key: string; kind: MediaKind };

type Part = Record<string, unknown>;
const isObject = (value: unknown): value is Part => typeof value === "object" && value !== null;

/** The fields of `object` that hold media: those whose value is a string. */
function fields(object: unknown, keys: string[], kind: MediaKind, out: MediaRef[]): void {
  if (!isObject(object)) return;
  for (const key of keys) if (typeof object[key] === "string") out.push({ holder: object, key, kind });
}

/** By a part's `type`: where its media value is. */
const PLACES = new Map<string, (part: Part, out: MediaRef[]) => void>(Object.entries({
  // OpenAI chat: `image_url: {url}`; a bare string is taken too (Responses items say it so).
  image_url: (part, out) => (typeof part.image_url === "string" ? fields(part, ["image_url"], "image", out) : fields(part.image_url, ["url"], "image", out)),
  input_image: (part, out) => fields(part, ["image_url", "file_url"], "image", out),
  // llama-server reads `data`, then `url`, and fetches either when it starts with "http".
  input_audio: (part, out) => fields(part.input_audio, ["data", "url"], "audio", out),
  input_video: (part, out) => fields(part.input_video, ["data", "url"], "video", out),
  video_url: (part, out) => fields(part.video_url, ["data", "url"], "video", out),
  file: (part, out) => fields(part.file, ["file_data", "file_url"], "file", out),
  input_file: (part, out) => fields(part, ["file_data", "file_url"], "file", out),
  // Anthropic: `source: {type: "url", url}` (a base64 source becomes a data: URL in llama-server).
  image: (part, out) => fields(part.source, ["url"], "image", out),
  document: (part, out) => fields(part.source, ["url"], "file", out),
} satisfies Record<string, (part: Part, out: MediaRef[]) => void>));

/**
 * Every media value in `body`. The walk is iterative (a body nested thousands deep cannot overflow
 * the stack) and visits objects and arrays only, so its cost is the body's structure, not its text.
 */
export function mediaRefs(body: unknown): MediaRef[] {
  const out: MediaRef[] = [];
  const pending: unknown[] = [body];
  while (pending.length > 0) {
    const node = pending.pop();
    if (Array.isArray(node)) {
      // Pushed last first, so that media are found in the order they were written.
      for (let i = node.length - 1; i >= 0; i--) if (isObject(node[i])) pending.push(node[i]);
    } else if (isObject(node)) {
      if (typeof node.type === "string") PLACES.get(node.type)?.(node, out);
      for (const key in node) if (isObject(node[key])) pending.push(node[key]);
    }
  }
  return out;
}

/**
 * How llama-server will read a media value: inline data (a data: URL, or bare base64, which has
 * no colon), or a URL it would open. It fetches anything that starts with "http".
 */
export function isInline(value: string): boolean {
  return value.startsWith("data:") || (!value.includes(":") && !value.startsWith("http"));
}
