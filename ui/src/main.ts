// Entry point: mounts the popover UI, and makes every link in it open in
// the default browser rather than in the popover (lib/links/links.ts).
import { mount } from 'svelte';
import App from './App.svelte';
import { openUrl } from './lib/ipc/opener';
import { installLinkHandler } from './lib/links/links';
import './app.css';

const target = document.getElementById('app');
if (!target) throw new Error('index.html has no #app element');

installLinkHandler(document, openUrl, (url, error) => console.warn(`could not open ${url}`, error));

export default mount(App, { target });
