// Test fixture: the settings as headroom_core::settings::Settings::default()
// serializes them, for the tests that fake the backend. (Not shipped: only
// *.test.ts files import it.)
import type { Settings } from './settings';

export const DEFAULT_SETTINGS: Readonly<Settings> = Object.freeze({
  contextLimit: 8192,
  maxTokens: 512,
  temperature: 0.7,
  topP: 0.95,
  osHeadroomGb: 4,
  cloudBaseUrl: null,
  cloudModel: null,
  localThresholdTokens: 8192,
  cloudCacheMb: 50,
  summariseForCloud: false,
  serverPort: 8080,
  kernel: 'auto',
  launchAtLogin: false,
  globalShortcut: 'Alt+Space',
  idleUnloadMinutes: 15,
  kvBits: null,
  quantizedKvStart: 5000,
  promptCacheMb: 4096,
  kvDiskMb: 4096,
  speculative: 'lookup',
  peer: null,
  draftModel: null,
  checkHubUpdates: true,
  thinking: {},
  serverRequireKey: true,
  serverAllowModelSwitch: false,
  toolCallsPerTurn: 8,
});
