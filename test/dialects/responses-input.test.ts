import { describe, expect, it } from "vitest";
import { servableInput } from "../../src/dialects/responses-input.ts";
import { HttpError } from "../../src/http/errors.ts";
import { CODEX_SECOND_TURN } from "../support/codex-items.ts";

// The Responses input items llama-server cannot take, rewritten into ones it can (or refused by
// index and type). Pure: a table of items in and items out.

describe("servableInput", () => {
  it.each<[string, unknown, unknown]>([
    ["a string input, as it is", "hello", "hello"],
    ["no input, as it is", undefined, undefined],
    [
      "Codex's assistant message (status, id, annotations, logprobs): its text kept",
      [{ type: "message", status: "completed", id: "msg_1", role: "assistant", content: [{ type: "output_text", text: "hi", annotations: [], logprobs: [] }] }],
      [{ type: "message", role: "assistant", content: [{ type: "output_text", text: "hi" }] }],
    ],
    [
      "Codex's developer message of several input_text parts",
      [{ type: "message", id: "msg_2", role: "developer", content: [{ type: "input_text", text: "a" }, { type: "input_text", text: "b" }] }],
      [{ type: "message", role: "developer", content: [{ type: "input_text", text: "a" }, { type: "input_text", text: "b" }] }],
    ],
    ["an untyped message with a string content", [{ role: "user", content: "x" }], [{ type: "message", role: "user", content: [{ type: "input_text", text: "x" }] }]],
    ["an assistant string content, as output_text", [{ role: "assistant", content: "y" }], [{ type: "message", role: "assistant", content: [{ type: "output_text", text: "y" }] }]],
    ["an assistant refusal, as its text", [{ type: "message", role: "assistant", content: [{ type: "refusal", refusal: "no" }] }], [{ type: "message", role: "assistant", content: [{ type: "output_text", text: "no" }] }]],
    ["an empty assistant message, dropped", [{ type: "message", role: "assistant", content: [] }], []],
    [
      "a user's output_text part, as input_text; images and files kept",
      [{ role: "user", content: [{ type: "output_text", text: "t" }, { type: "input_image", image_url: "data:," }, { type: "input_file", file_data: "x" }] }],
      [{ type: "message", role: "user", content: [{ type: "input_text", text: "t" }, { type: "input_image", image_url: "data:," }, { type: "input_file", file_data: "x" }] }],
    ],
    [
      "reasoning without content or summary (encrypted_content null): dropped",
      [{ type: "reasoning", id: "rs_1", summary: [], encrypted_content: null }],
      [],
    ],
    [
      "reasoning with a summary only: the summary's text as its content",
      [{ type: "reasoning", id: "rs_2", summary: [{ type: "summary_text", text: "s" }], content: null }],
      [{ type: "reasoning", summary: [{ type: "summary_text", text: "s" }], content: [{ type: "reasoning_text", text: "s" }] }],
    ],
    [
      "reasoning with content, kept",
      [{ type: "reasoning", summary: [], content: [{ type: "reasoning_text", text: "r" }] }],
      [{ type: "reasoning", summary: [], content: [{ type: "reasoning_text", text: "r" }] }],
    ],
    [
      "a function_call whose arguments are an object: as a JSON string",
      [{ type: "function_call", id: "fc_1", call_id: "c1", name: "f", arguments: { a: 1 }, status: "completed" }],
      [{ type: "function_call", call_id: "c1", name: "f", arguments: '{"a":1}' }],
    ],
    [
      "a function_call_output of text and image parts: the text as input_text, the image kept (for the media checks)",
      [{ type: "function_call_output", call_id: "c1", output: [{ type: "output_text", text: "ok" }, { type: "input_image", image_url: "data:," }] }],
      [{ type: "function_call_output", call_id: "c1", output: [{ type: "input_text", text: "ok" }, { type: "input_image", image_url: "data:," }] }],
    ],
    [
      "a function_call_output's other parts: their text, else as JSON",
      [{ type: "function_call_output", call_id: "c1", output: [{ type: "input_audio", data: "x" }] }],
      [{ type: "function_call_output", call_id: "c1", output: [{ type: "input_text", text: '{"type":"input_audio","data":"x"}' }] }],
    ],
    ["a function_call_output of an object: as JSON", [{ type: "function_call_output", call_id: "c1", output: { exit: 0 } }], [{ type: "function_call_output", call_id: "c1", output: '{"exit":0}' }]],
    [
      "Codex's custom_tool_call (apply_patch) and its output: a function call with the raw input as its argument",
      [
        { type: "custom_tool_call", id: "ctc_1", status: "completed", call_id: "c2", name: "apply_patch", input: "*** Begin Patch" },
        { type: "custom_tool_call_output", call_id: "c2", output: "Done" },
      ],
      [
        { type: "function_call", call_id: "c2", name: "apply_patch", arguments: '{"input":"*** Begin Patch"}' },
        { type: "function_call_output", call_id: "c2", output: "Done" },
      ],
    ],
    [
      "a local_shell_call and its output: a local_shell function call with the action's fields",
      [
        { type: "local_shell_call", id: "ls_1", call_id: "c3", status: "completed", action: { type: "exec", command: ["ls"], working_directory: "/w" } },
        { type: "local_shell_call_output", call_id: "c3", output: "a\nb" },
      ],
      [
        { type: "function_call", call_id: "c3", name: "local_shell", arguments: '{"command":["ls"],"working_directory":"/w"}' },
        { type: "function_call_output", call_id: "c3", output: "a\nb" },
      ],
    ],
  ])("%s", (_, input, expected) => {
    expect(servableInput(input)).toEqual(expected);
  });

  it("Codex's second turn: every item one llama-server takes, its apply_patch call as a function call", () => {
    const sent = servableInput(CODEX_SECOND_TURN) as { type: string }[];
    const types = ["message", "message", "message", "message", "reasoning", "function_call", "function_call_output", "function_call", "function_call_output", "message", "message"];
    expect(sent.map((item) => item.type)).toEqual(types);
  });

  it.each<[string, unknown, string]>([
    ["an unknown item type", [{ role: "user", content: "x" }, { type: "web_search_call", id: "ws_1", status: "completed" }], 'input[1] (web_search_call): items of type "web_search_call"'],
    ["an item_reference (nothing kept by item id)", [{ type: "item_reference", id: "msg_1" }], "input[0] (item_reference)"],
    ["an item that is not an object", ["hello"], "input[0] (string): an input item must be an object"],
    ["a message of an unknown role", [{ type: "message", role: "tool", content: "x" }], 'input[0] (message): a message\'s role must be'],
    ["a part with no text", [{ role: "user", content: [{ type: "input_audio", input_audio: {} }] }], 'input[0] (message): a message part of type "input_audio"'],
    ["a message without content", [{ type: "message", role: "user" }], "input[0] (message): a message's content must be"],
  ])("refuses %s with a 400 naming its index and type", (_, input, message) => {
    const error = (() => {
      try {
        servableInput(input);
      } catch (caught) {
        return caught;
      }
    })();
    expect(error).toBeInstanceOf(HttpError);
    expect(error).toMatchObject({ status: 400, type: "invalid_request_error", code: "unsupported_input_item" });
    expect((error as Error).message).toContain(message);
  });
});
