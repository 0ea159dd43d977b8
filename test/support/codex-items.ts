// What Codex CLI 0.171.0 sends as a Responses `input` once a turn has happened: the messages as
// recorded from a real run through `llamadock launch codex` (texts shortened), and the items of a
// turn that called a tool in the shapes Codex writes them back (a reasoning item without its text,
// encrypted_content null; a function_call to its exec_command tool; the call's output).

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
  { type: "reasoning", id: "rs_0b0c7a1d", summary: [], encrypted_content: null },
  { type: "function_call", id: "fc_0b0c7a1e", name: "exec_command", arguments: '{"cmd":"ls","workdir":"."}', call_id: "call_0b0c7a1f" },
  { type: "function_call_output", call_id: "call_0b0c7a1f", output: "Chunk ID: 1\nWall time: 0.0 seconds\nProcess exited with code 0\nOutput:\nREADME.md\n" },
  { type: "message", status: "completed", id: "msg_Uy1NjnvPkhmw5liCaL6QrxwgMTblsyYx", role: "assistant", content: [{ type: "output_text", text: "README.md", annotations: [], logprobs: [] }] },
  { type: "message", id: "msg_01a21d0b-9d87-7c90-a4f5-9ae402140092", role: "user", content: [{ type: "input_text", text: "now say done again" }] },
];
