// Model output as HTML: Markdown through `marked`, then DOMPurify. The text
// is untrusted, so nothing that runs, loads from the network or navigates
// to a script survives: no <script>/<style>/forms/frames, no event-handler
// attributes, no javascript:/data: links, no images except inline data:
// ones (a remote image would be a request the user never agreed to).
// Links that survive are followed by the one delegated handler in
// ../links/links.ts (the default browser), never by the popover itself.
import DOMPurify from 'dompurify';
import { Marked } from 'marked';
import { OPENABLE } from '../links/links';

const markdown = new Marked({ gfm: true, breaks: false, async: false });

/** Link targets a user may follow: what the handler opens, and in-page anchors. */
const SAFE_LINK = new RegExp(`${OPENABLE.source}|^#`, 'i');
const SAFE_IMAGE = /^data:image\/(?:png|gif|jpeg|webp);/i;

const purify = DOMPurify();
purify.addHook('afterSanitizeAttributes', (node) => {
  // Every element DOMPurify keeps that navigates: <a> and an image map's <area>.
  if (node.tagName === 'A' || node.tagName === 'AREA') {
    const href = node.getAttribute('href') ?? '';
    if (!SAFE_LINK.test(href.trim())) node.removeAttribute('href');
    // Where it would open and what it would do are the handler's business.
    node.removeAttribute('target');
    node.removeAttribute('download');
    node.removeAttribute('ping');
    if (node.hasAttribute('href') && !href.trim().startsWith('#')) node.setAttribute('rel', 'noopener noreferrer');
  }
  if (node.tagName === 'IMG') {
    const src = node.getAttribute('src') ?? '';
    if (!SAFE_IMAGE.test(src.trim())) node.removeAttribute('src');
    node.removeAttribute('srcset');
  }
});

const CONFIG = {
  FORBID_TAGS: ['style', 'form', 'input', 'button', 'textarea', 'select', 'iframe', 'object', 'embed', 'video', 'audio', 'source', 'link', 'meta', 'base', 'svg', 'math'],
  FORBID_ATTR: ['style', 'srcset', 'formaction', 'xlink:href', 'background', 'poster'],
  ALLOW_DATA_ATTR: false,
};

/** Safe HTML for an assistant message (partial Markdown renders fine while streaming). */
export function renderMarkdown(source: string): string {
  const html = markdown.parse(source) as string;
  return purify.sanitize(html, CONFIG) as string;
}
