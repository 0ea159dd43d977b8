// An error answer from llama-server (or ours) in OpenAI's shape, taken apart so that a dialect can
// give it again in its own: the message, and the Retry-After header to keep.

export type UpstreamError = { status: number; message: string; headers: Record<string, string> };

export async function upstreamError(response: Response): Promise<UpstreamError> {
  const text = await response.text();
  let message = text;
  try {
    message = (JSON.parse(text) as { error?: { message?: string } }).error?.message ?? text;
  } catch {
    // not JSON after all: its text is the message
  }
  const retryAfter = response.headers.get("retry-after");
  return { status: response.status, message, headers: retryAfter ? { "retry-after": retryAfter } : {} };
}
