// Typed bindings for pulling a model from the Hugging Face hub
// (src-tauri/src/commands/pull.rs): the verdict from the repo's headers
// first, then the download, whose progress streams over a Channel.
import { call, Channel } from './invoke';
import type { FitReport, ModelEntry } from './models';

/** Mirrors `headroom_hub::RemoteFile`. */
export interface RemoteFile {
  path: string;
  size: number;
  /** The blob name in the HF cache (the sha256 for LFS files). */
  etag: string;
  lfs: boolean;
}

/** Mirrors `headroom_hub::RemoteModel`: what the hub says, before any weight is downloaded. */
export interface RemoteModel {
  repo: string;
  revision: string;
  commit: string;
  arch: string;
  bits: number | null;
  files: RemoteFile[];
  total_bytes: number;
  /** Already complete in the local cache (not downloaded again). */
  cached_bytes: number;
}

/** What `model_pull_check` resolves to. */
export interface PullCheck {
  model: RemoteModel;
  endpoint: string;
  /** The verdict at the app's context limit, from the safetensors headers. */
  fit: FitReport;
}

/** Mirrors `headroom_hub::PullEvent` (serde: tag `event`, fields inline, snake_case). */
export type PullEvent =
  | { event: 'started'; repo: string; commit: string; files: number; total_bytes: number; cached_bytes: number }
  | {
      event: 'progress';
      file: string;
      file_bytes: number;
      file_size: number;
      done_bytes: number;
      total_bytes: number;
      bytes_per_sec: number;
      /** Null until the first bytes arrive. */
      eta_secs: number | null;
    }
  | { event: 'retrying'; file: string; attempt: number; resume_from: number; reason: string }
  | { event: 'file_done'; file: string; size: number; verified: 'sha256' | 'size'; reused: boolean }
  | { event: 'finished'; repo: string; snapshot: string; downloaded_bytes: number; elapsed_secs: number };

/** What `model_pull` resolves to: the snapshot and the picker's entry for the model (with its badge). */
export interface PullResult {
  snapshot: string;
  downloaded_bytes: number;
  entry: ModelEntry | null;
}

export interface PullOptions {
  /** Branch, tag or commit (default `main`). */
  revision?: string;
  /** Download even though the verdict says it would swap. */
  override?: boolean;
}

/** The codes a pull rejects with besides the generic ones. */
export const PULL_CANCELLED = 'PULL_CANCELLED';
export const PULL_IN_PROGRESS = 'PULL_IN_PROGRESS';
export const REPO_NOT_FOUND = 'REPO_NOT_FOUND';
export const DOWNLOAD_CORRUPT = 'DOWNLOAD_CORRUPT';

/** The fit verdict for `repo` from its headers; downloads no weights. */
export function modelPullCheck(repo: string, options: Pick<PullOptions, 'revision'> = {}): Promise<PullCheck> {
  return call<PullCheck>('model_pull_check', { repo, ...options });
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
  return call<PullResult>('model_pull', { repo, ...options, onProgress: channel });
}

/** Cancels the pull in progress; resolves to false if none was running. */
export function modelPullCancel(): Promise<boolean> {
  return call<boolean>('model_pull_cancel');
}
