// Copying an answer. The async Clipboard API needs a secure context and, in
// some webviews (WebKitGTK), a permission it may not have; the old
// execCommand path works there, so it is the fallback.

/** Puts `text` on the clipboard; resolves to whether it worked. */
export async function copyText(text: string, doc: Document = document): Promise<boolean> {
  try {
    if (globalThis.navigator?.clipboard?.writeText) {
      await globalThis.navigator.clipboard.writeText(text);
      return true;
    }
  } catch {
    // Denied or unavailable: try the fallback below.
  }
  const area = doc.createElement('textarea');
  area.value = text;
  area.setAttribute('readonly', '');
  area.style.position = 'fixed';
  area.style.opacity = '0';
  doc.body.appendChild(area);
  area.select();
  try {
    return doc.execCommand('copy');
  } catch {
    return false;
  } finally {
    area.remove();
  }
}
