// Typed bindings for the MCP tools (src-tauri/src/commands/tools.rs):
// Settings → Tools and the answer to a call that waits for approval.
import type { Approval, ServerView, ToolFlags, ToolsView, ToolView } from './generated';
import { command } from './invoke';

export type { Approval, ServerView, ToolFlags, ToolsView, ToolView };

/** Every server of mcp.json, its state and its tools. */
export function toolsList(): Promise<ToolsView> {
  return command('tools_list');
}

/** Reads mcp.json again and starts its servers; resolves once each has started or failed. */
export function toolsRestart(): Promise<ToolsView> {
  return command('tools_restart');
}

/** Sets one tool's switches; resolves to the whole view. */
export function toolSetFlags(server: string, tool: string, flags: ToolFlags): Promise<ToolsView> {
  return command('tool_set_flags', { server, tool, flags });
}

/** Answers "Allow this call?"; false when nothing waits for it any more. */
export function toolAnswer(runId: number, callId: string, answer: Approval): Promise<boolean> {
  return command('tool_answer', { runId, callId, answer });
}
