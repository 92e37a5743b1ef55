// Typed bindings for pulling a model from the Hugging Face hub
// (src-tauri/src/commands/pull.rs): the verdict from the repo's headers
// first, then the download, whose progress streams over a Channel.
import type { PullCheck, PullEvent, PullResult, RemoteFile, RemoteModel } from './generated';
import { command, Channel, type ErrorCode } from './invoke';

export type { PullCheck, PullEvent, RemoteFile, RemoteModel };
export type { PullResult };
export interface PullOptions {
  /** Branch, tag or commit (default `main`). */
  revision?: string;
  /** Download even though the verdict says it would swap. */
  override?: boolean;
}

/** The codes a pull rejects with besides the generic ones. */
export const PULL_CANCELLED = 'PULL_CANCELLED' satisfies ErrorCode;
export const PULL_IN_PROGRESS = 'PULL_IN_PROGRESS' satisfies ErrorCode;
export const REPO_NOT_FOUND = 'REPO_NOT_FOUND' satisfies ErrorCode;
export const DOWNLOAD_CORRUPT = 'DOWNLOAD_CORRUPT' satisfies ErrorCode;

/** The fit verdict for `repo` from its headers; downloads no weights. */
export function modelPullCheck(repo: string, options: Pick<PullOptions, 'revision'> = {}): Promise<PullCheck> {
  return command('model_pull_check', { repo, ...options });
}

/**
 * Downloads `repo` into the HF cache, calling `onProgress` for each event.
 * Rejects with `MODEL_TOO_LARGE` (nothing downloaded) when it would swap,
 * unless `override`; with `PULL_CANCELLED` after `modelPullCancel()`.
 */
export function modelPull(
  repo: string,
  onProgress: (event: PullEvent) => void,
  options: PullOptions = {},
): Promise<PullResult> {
  const channel = new Channel<PullEvent>();
  channel.onmessage = onProgress;
  return command('model_pull', { repo, ...options, onProgress: channel });
}

/** Cancels the pull in progress; resolves to false if none was running. */
export function modelPullCancel(): Promise<boolean> {
  return command('model_pull_cancel');
}
