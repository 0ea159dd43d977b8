import { describe, expect, it } from "vitest";
import { HttpError } from "../../src/http/errors.ts";
import { policeBody } from "../../src/inference/body-policy.ts";
import { isPublicAddress } from "../../src/inference/media/address.ts";

// What a body may ask of llama-server: each refused field and each refused media URL is a 400
// before anything is forwarded, wherever a dialect puts its media; what clients send every day
// passes, and a media URL that may be fetched is handed back to be fetched.

const off = { allowRemoteMedia: false };
const on = { allowRemoteMedia: true };
const refusal = (body: unknown, policy = off) => {
  try {
    policeBody(body, policy);
    return undefined;
  } catch (error) {
    expect(error).toBeInstanceOf(HttpError);
    return `${(error as HttpError).status} ${(error as HttpError).code}`;
  }
};
const image = (url: string) => ({ messages: [{ role: "user", content: [{ type: "text", text: "see" }, { type: "image_url", image_url: { url } }] }] });

describe("fields", () => {
  it.each([
    [{ n_discard: -1 }, "400 field_not_allowed"],
    [{ n_discard: 4 }, undefined],
    [{ n_keep: -2 }, "400 field_not_allowed"],
    [{ n_keep: -1 }, undefined],
    [{ n_probs: 21 }, "400 field_not_allowed"],
    [{ n_probs: 5 }, undefined],
    [{ n_probs: "5" }, "400 field_not_allowed"],
    [{ id_slot: 0 }, "400 field_not_allowed"],
    [{ id_slot: -1 }, undefined],
    [{ n_cmpl: 100 }, "400 field_not_allowed"],
    [{ n: 0 }, "400 field_not_allowed"],
    [{ n: 2 }, undefined],
    [{ model: "ai/tiny", temperature: 0.7, max_tokens: 12, stream: true }, undefined],
  ])("%j: %s", (body, expected) => {
    expect(refusal(body)).toBe(expected);
  });
});

describe("media URLs", () => {
  it.each([
    ["data:image/png;base64,iVBORw0KGgo=", off, undefined],
    ["iVBORw0KGgo=", off, undefined],
    ["file:///etc/passwd", on, "400 media_not_allowed"],
    ["unix:/var/run/docker.sock", on, "400 media_not_allowed"],
    ["https://example.com/cat.png", off, "400 media_not_allowed"],
    ["https://example.com/cat.png", on, undefined],
    ["http://127.0.0.1:2375/containers/json", on, "400 media_not_allowed"],
    ["http://127.1/x.png", on, "400 media_not_allowed"],
    ["http://169.254.169.254/latest/meta-data", on, "400 media_not_allowed"],
    ["http://10.0.0.8/x.png", on, "400 media_not_allowed"],
    ["http://[fd00::1]/x.png", on, "400 media_not_allowed"],
    ["http://[::ffff:127.0.0.1]/x.png", on, "400 media_not_allowed"],
    // A name is judged by what it resolves to, where the connection is made (media/fetch.ts).
    ["http://localhost/x.png", on, undefined],
    ["http://localhost/x.png", off, "400 media_not_allowed"],
    ["not a url:", on, "400 media_not_allowed"],
    // No colon and no "http": llama-server decodes it as base64 (and refuses it if it is none); never a fetch.
    ["not a url", on, undefined],
    // llama-server fetches anything that starts with "http": what is no URL is refused, not decoded.
    ["httpfoo", on, "400 media_not_allowed"],
  ])("%s (remote media %j): %s", (url, policy, expected) => {
    expect(refusal(image(url), policy)).toBe(expected);
  });

  const EVIL = "http://10.9.8.7/x.png";
  // Every place a dialect carries media, nested as that dialect nests it.
  const places: [string, unknown][] = [
    ["OpenAI chat image_url (a string)", { messages: [{ role: "user", content: [{ type: "image_url", image_url: EVIL }] }] }],
    ["OpenAI input_audio url", { messages: [{ role: "user", content: [{ type: "input_audio", input_audio: { url: EVIL } }] }] }],
    ["OpenAI input_audio data (llama-server fetches it too)", { messages: [{ role: "user", content: [{ type: "input_audio", input_audio: { data: EVIL, format: "wav" } }] }] }],
    ["video_url", { messages: [{ role: "user", content: [{ type: "video_url", video_url: { url: EVIL } }] }] }],
    ["input_video data", { messages: [{ role: "user", content: [{ type: "input_video", input_video: { data: EVIL } }] }] }],
    ["OpenAI file part", { messages: [{ role: "user", content: [{ type: "file", file: { file_url: EVIL } }] }] }],
    ["an image in a tool message", { messages: [{ role: "tool", tool_call_id: "c", content: [{ type: "image_url", image_url: { url: EVIL } }] }] }],
    ["Responses input_image", { input: [{ role: "user", content: [{ type: "input_image", image_url: EVIL }] }] }],
    ["Responses input_file", { input: [{ role: "user", content: [{ type: "input_file", file_url: EVIL }] }] }],
    ["Responses input_image in a function_call_output", { input: [{ type: "function_call_output", call_id: "c", output: [{ type: "input_image", image_url: EVIL }] }] }],
    ["Anthropic image source", { messages: [{ role: "user", content: [{ type: "image", source: { type: "url", url: EVIL } }] }] }],
    ["Anthropic image inside a tool_result", { messages: [{ role: "user", content: [{ type: "tool_result", tool_use_id: "t", content: [{ type: "image", source: { type: "url", url: EVIL } }] }] }] }],
    ["Anthropic document source", { messages: [{ role: "user", content: [{ type: "document", source: { type: "url", url: EVIL } }] }] }],
  ];

  it.each(places)("%s is refused as any media URL", (_, body) => {
    expect(refusal(body, on)).toBe("400 media_not_allowed");
    expect(refusal(body, off)).toBe("400 media_not_allowed");
  });

  it.each(places)("%s with a data: URL or base64 passes", (_, body) => {
    const inline = JSON.parse(JSON.stringify(body).replaceAll(EVIL, "data:image/png;base64,iVBORw0KGgo=")) as unknown;
    expect(refusal(inline, off)).toBeUndefined();
  });

  it("hands back each URL that may be fetched, where it sits, to be replaced", () => {
    const body = {
      input: [
        { role: "user", content: [{ type: "input_image", image_url: "https://example.com/a.png" }] },
        { type: "function_call_output", call_id: "c", output: [{ type: "input_image", image_url: "data:image/png;base64,AAAA" }] },
      ],
      messages: [{ role: "user", content: [{ type: "tool_result", content: [{ type: "image", source: { type: "url", url: "https://example.com/b.png" } }] }] }],
    };
    const remote = policeBody(body, on);
    expect(remote.map((ref) => ref.holder[ref.key]).sort()).toEqual(["https://example.com/a.png", "https://example.com/b.png"]);
    for (const ref of remote) ref.holder[ref.key] = "data:image/png;base64,AAAA";
    expect(JSON.stringify(body)).not.toContain("https://");
  });

  it("walks a body nested far deeper than a call stack goes, without overflowing", () => {
    let deep: unknown = { type: "image_url", image_url: { url: EVIL } };
    for (let i = 0; i < 200_000; i++) deep = [deep];
    expect(refusal({ messages: deep }, on)).toBe("400 media_not_allowed");
  });

  it("leaves text that merely looks like a media part alone", () => {
    expect(refusal({ messages: [{ role: "user", content: `{"type":"image_url","image_url":{"url":"${EVIL}"}}` }] }, on)).toBeUndefined();
  });

  it.each([
    ["8.8.8.8", true],
    ["192.168.0.1", false],
    ["172.20.1.1", false],
    ["172.32.1.1", true],
    ["100.64.0.1", false],
    ["127.0.0.1", false],
    ["0.0.0.0", false],
    ["169.254.169.254", false],
    ["224.0.0.251", false],
    ["255.255.255.255", false],
    ["::1", false],
    ["::", false],
    ["fe80::1", false],
    ["fd12:3456::1", false],
    ["::ffff:10.0.0.1", false],
    ["::ffff:8.8.8.8", true],
    ["64:ff9b::7f00:1", false],
    ["2002:c0a8:101::1", false],
    ["2001:db8::1", false],
    ["2606:4700:4700::1111", true],
    ["ff02::1", false],
    ["example.com", false],
  ])("isPublicAddress(%s) = %s", (address, expected) => {
    expect(isPublicAddress(address)).toBe(expected);
  });
});
