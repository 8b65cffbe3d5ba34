/**
 * @internal Text that came from outside the library (a file name in a shared folder, a message
 * quoting one) made safe to print on a terminal: control characters (C0, DEL, C1) and
 * bidirectional overrides are written as `\xNN` or `\u{NNNN}`, so that a planted name cannot set
 * the window title, clear the screen or forge a coloured line. Everything else is kept.
 */
export function printable(text: string): string {
  // eslint-disable-next-line no-control-regex
  return text.replace(/[\u0000-\u001f\u007f-\u009f\u202a-\u202e\u2066-\u2069]/g, (c) => {
    const n = c.charCodeAt(0);
    return n < 0x80 ? `\\x${n.toString(16).padStart(2, '0')}` : `\\u{${n.toString(16).padStart(4, '0')}}`;
  });
}
