// One delegated click handler for every link in the popover: rendered
// answers are untrusted HTML, and a Tauri webview ignores target="_blank",
// so a followed link would replace the popover itself with a web page.
// Instead, web and mail links go to the default browser (the opener
// plugin) and in-page anchors scroll; nothing ever navigates the window.

/** What the browser may be asked to open; everything else is inert. */
export const OPENABLE = /^(?:https?:|mailto:)/i;

/** Elements that navigate when activated: the ones DOMPurify keeps. */
const LINK = 'a[href], area[href]';

/** Marks a link the OS could not open, where the user just clicked. */
export const OPEN_FAILED_CLASS = 'link-open-failed';

function markFailed(link: Element, message: string): void {
  link.classList.add(OPEN_FAILED_CLASS);
  link.setAttribute('title', `Could not open this link in your browser: ${message}`);
}

/**
 * Handles clicks (and middle clicks) on links anywhere under `root`.
 * `open` hands a URL to the OS; if it fails, the link says why (its title)
 * and `onError` hears it too. Returns the function that removes the handler.
 */
export function installLinkHandler(
  root: EventTarget,
  open: (url: string) => Promise<void>,
  onError: (url: string, error: unknown) => void = () => {},
): () => void {
  const handle = (event: MouseEvent) => {
    // Right clicks open the context menu, which navigates nowhere.
    if (event.type === 'auxclick' && event.button !== 1) return;
    const target = event.target;
    if (!(target instanceof Element)) return;
    const link = target.closest(LINK);
    if (!link) return;
    // Captured before anything else sees it, and always cancelled: not even
    // an in-page "#…" may change the popover's URL.
    event.preventDefault();
    const href = (link.getAttribute('href') ?? '').trim();
    if (href.startsWith('#')) {
      scrollToAnchor(link, href.slice(1));
      return;
    }
    if (!OPENABLE.test(href)) return;
    // The resolved URL, as the browser would follow it.
    const url = (link as HTMLAnchorElement | HTMLAreaElement).href || href;
    link.classList.remove(OPEN_FAILED_CLASS);
    open(url).catch((error: unknown) => {
      const message =
        typeof error === 'object' && error !== null && 'message' in error ? String(error.message) : String(error);
      markFailed(link, message);
      onError(url, error);
    });
  };
  const listener = handle as EventListener;
  root.addEventListener('click', listener, true);
  root.addEventListener('auxclick', listener, true);
  return () => {
    root.removeEventListener('click', listener, true);
    root.removeEventListener('auxclick', listener, true);
  };
}

/** Scrolls to the element a "#name" anchor names, without touching the URL. */
function scrollToAnchor(link: Element, fragment: string): void {
  let id = fragment;
  try {
    id = decodeURIComponent(fragment);
  } catch {
    // a malformed escape: look for it as written
  }
  if (!id) return;
  const doc = link.ownerDocument;
  const target = doc.getElementById(id) ?? doc.getElementsByName(id)[0];
  target?.scrollIntoView({ block: 'start' });
}
