import { MEDIA_MARK } from "./core.ts";
import type { RunnerCalls } from "./question.ts";

// Images in a question's prompt. The prompt's text holds MEDIA_MARK where each image goes (the
// chat template keeps it as it is); llama-server takes the images beside the text
// (`multimodal_data`, base64, in the order of the marks) and finds their places by its own mark,
// which each llama-server process draws at random (its `/props` say which): so a user's text
// cannot place an image. Each of ours is replaced by the runner's before the prompt is sent.

/** Each runner's mark, by the runner's process. */
const marks = new WeakMap<object, string>();

/** The runner's mark for an image (llama-server's `/props`, `media_marker`; MEDIA_MARK for one that has none). */
export async function runnerMark(runner: RunnerCalls): Promise<string> {
  const known = marks.get(runner.process);
  if (known) return known;
  const props = await runner.get("/props");
  const mark = typeof props.json.media_marker === "string" && props.json.media_marker ? props.json.media_marker : MEDIA_MARK;
  marks.set(runner.process, mark);
  return mark;
}

/** `prompt` with each of our marks replaced by the runner's. */
export const withRunnerMarks = (prompt: string, mark: string): string => prompt.split(MEDIA_MARK).join(mark);
