import * as z from "zod";
import { readJson } from "../http/body.ts";
import type { Route } from "../http/router.ts";
import { counted, ENGINE, infer, type InferenceDeps } from "../inference/routes.ts";

// Rerank and score. llama-server serves rerank natively (Jina/Cohere shape: `query`, `documents`,
// `top_n` -> `results` of `index` and `relevance_score`, best first) on a runner started with
// `--rerank`: forwarded as is. `/score` is vLLM's shape (`text_1`, `text_2` -> `data` of `score`
// in the documents' order), which llama-server lacks: translated onto rerank.

/** The paths DMR serves (`/engines[/<engine>]/{rerank,score}` and the bare aliases), with and without `/v1`. */
const BASES = [`/engines/${ENGINE}`, "/engines", ""].flatMap((base) => [base, `${base}/v1`]);

const text = z.string({ error: "text_1 and text_2 must be strings or arrays of strings" });
const ScoreBody = z.looseObject({
  model: z.string({ error: "model is required" }).trim().min(1, "model is required"),
  // One query: a string, or a list holding one (vLLM's pairwise form with many queries is not served).
  text_1: z.union([text, z.array(text).length(1, "text_1 must be one query")]),
  text_2: z.union([text, z.array(text).min(1, "text_2 must not be empty")]),
});

type RerankAnswer = { results: { index: number; relevance_score: number }[]; usage?: { prompt_tokens?: number; total_tokens?: number } };

/** Scores every document of `text_2` against the query in `text_1`, in the documents' order. */
async function score(deps: InferenceDeps, request: Request): Promise<Response> {
  const body = await readJson(request, deps.bodyLimit, ScoreBody);
  const query = Array.isArray(body.text_1) ? body.text_1[0]! : body.text_1;
  const documents = Array.isArray(body.text_2) ? body.text_2 : [body.text_2];
  const answer = await infer(deps, "rerank", request, { json: { model: body.model, query, documents, top_n: documents.length } });
  if (!answer.ok) return answer; // an error, already in the OpenAI envelope
  const { results, usage } = (await answer.json()) as RerankAnswer;
  const data = results
    .toSorted((a, b) => a.index - b.index)
    .map((result) => ({ index: result.index, object: "score", score: result.relevance_score }));
  return Response.json({
    id: `score-${crypto.randomUUID().replaceAll("-", "")}`,
    object: "list",
    created: Math.floor(Date.now() / 1000),
    model: body.model,
    data,
    usage: { prompt_tokens: usage?.prompt_tokens ?? 0, total_tokens: usage?.total_tokens ?? 0 },
  });
}

export function rerankRoutes(deps: InferenceDeps): Route[] {
  const rerank = (request: Request) => counted(deps.metrics, "rerank", () => infer(deps, "rerank", request));
  const scored = (request: Request) => counted(deps.metrics, "score", () => score(deps, request));
  return BASES.flatMap((base): Route[] => [
    { method: "POST", path: `${base}/rerank`, handle: rerank },
    { method: "POST", path: `${base}/score`, handle: scored },
  ]);
}
