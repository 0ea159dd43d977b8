// What Codex CLI 0.171.0 sends as a Responses `input` once a turn has happened, recorded from real
// runs against a tiny model (texts shortened): its messages, then the items of a turn that reasoned
// and called tools as Codex sends them back (a reasoning item with encrypted_content null; a
// function_call to its exec_command tool and the call's output; its freeform apply_patch tool's
// custom_tool_call and output, which llama-server alone refuses with "Cannot determine type of 'item'").

export const CODEX_SECOND_TURN: Record<string, unknown>[] = [
  { type: "message", id: "msg_bfb59e05-ccbd-57d9-83ed-800ffa04e746", role: "developer", content: [{ type: "input_text", text: "You are a coding agent running in the Codex CLI, a terminal-based coding assistant." }] },
  {
    type: "message",
    id: "msg_01a21d0b-5774-7e51-b3b8-0ddfb1257452",
    role: "developer",
    content: [
      { type: "input_text", text: "<skills_instructions>\n## Skills\n</skills_instructions>" },
      { type: "input_text", text: "<permissions instructions>\nFilesystem sandboxing defines which files can be read or written.\n</permissions instructions>" },
    ],
  },
  { type: "message", id: "msg_01a21d0b-5774-7e51-b3b8-0dee5add3a12", role: "user", content: [{ type: "input_text", text: "<environment_context>\n  <shell>bash</shell>\n</environment_context>" }] },
  { type: "message", id: "msg_01a21d0b-5783-77f3-aff5-b6a817b7b22b", role: "user", content: [{ type: "input_text", text: "list the files here with ls, then say done" }] },
  {
    type: "reasoning",
    id: "rs_0b0c7a1d",
    summary: [{ type: "summary_text", text: "I will list the files." }],
    content: [{ type: "reasoning_text", text: "The user wants ls." }],
    encrypted_content: null,
  },
  { type: "function_call", id: "fc_0b0c7a1e", name: "exec_command", arguments: '{"cmd":"ls"}', call_id: "call_0b0c7a1f" },
  { type: "function_call_output", call_id: "call_0b0c7a1f", output: "README.md\n" },
  { type: "custom_tool_call", id: "ctc_0b0c7a20", status: "completed", call_id: "call_0b0c7a21", name: "apply_patch", input: "*** Begin Patch\n*** End Patch" },
  { type: "custom_tool_call_output", call_id: "call_0b0c7a21", output: "Done!" },
  { type: "message", status: "completed", id: "msg_Uy1NjnvPkhmw5liCaL6QrxwgMTblsyYx", role: "assistant", content: [{ type: "output_text", text: "README.md", annotations: [], logprobs: [] }] },
  { type: "message", id: "msg_01a21d0b-9d87-7c90-a4f5-9ae402140092", role: "user", content: [{ type: "input_text", text: "now say done again" }] },
];
