/**
 * How free text (board names, check messages, console output, paths from a loaded report) goes
 * into each report format. The reporters and the sections `hil compare` and `hil merge` render
 * share them, so a name reads the same in every place it lands and none of them can break out.
 */

/**
 * Removes what no report format should carry: ANSI escape sequences (a board's coloured console
 * output), C0 controls but tab/LF/CR, DEL, lone surrogates and U+FFFE/U+FFFF (invalid in XML 1.0).
 */
export function stripControl(text: string): string {
  return (
    text
      // biome-ignore lint/suspicious/noControlCharactersInRegex: removing them is the point.
      .replace(/\u001b\[[0-9;?]*[ -/]*[@-~]/g, '')
      // biome-ignore lint/suspicious/noControlCharactersInRegex: removing them is the point.
      .replace(/[\u0000-\u0008\u000b\u000c\u000e-\u001f\u007f\ufffe\uffff]/g, '')
      .replace(/[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/g, '')
  );
}

/** On one terminal line: line breaks and tabs become a space. */
export function singleLine(text: string): string {
  return stripControl(text).replace(/[\r\n\t]+/g, ' ');
}

// ---- Markdown (the GitHub step summary) -----------------------------------------------------

/**
 * Free text in Markdown: punctuation that would format, link or break a table row is
 * backslash-escaped (CommonMark), line breaks become `<br>`.
 */
export function markdownText(text: string): string {
  return stripControl(text)
    .replace(/[\\`*_[\]<>|~&]/g, '\\$&')
    .replace(/\r?\n/g, '<br>');
}

/** Ids and names as inline code; a backtick inside cannot occur in them, but stay safe. */
export function markdownCode(text: string): string {
  return `\`${stripControl(text).replace(/`/g, "'").replace(/\|/g, '\\|')}\``;
}

/** A table's lines; `align` right-aligns the columns marked `r` (numbers). */
export function markdownTable(
  header: readonly string[],
  rows: readonly (readonly string[])[],
  align?: readonly ('l' | 'r')[],
): string[] {
  const row = (cells: readonly string[]) => `| ${cells.join(' | ')} |`;
  const rule = header.map((_, i) => (align?.[i] === 'r' ? '---:' : '---'));
  return [row(header), row(rule), ...rows.map(row)];
}

// ---- HTML and XML ---------------------------------------------------------------------------

/** HTML text and attribute values. */
export function escapeHtml(text: string): string {
  return stripControl(text)
    .replace(/&/g, '&amp;')
    .replace(/</g, '&lt;')
    .replace(/>/g, '&gt;')
    .replace(/"/g, '&quot;')
    .replace(/'/g, '&#39;');
}

/** XML text content (JUnit). */
export function xmlText(text: string): string {
  return stripControl(text).replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');
}

/** Attribute values also keep their line breaks and tabs (a parser would normalise them to spaces). */
export function xmlAttr(text: string): string {
  return xmlText(text)
    .replace(/"/g, '&quot;')
    .replace(/'/g, '&apos;')
    .replace(/\t/g, '&#9;')
    .replace(/\n/g, '&#10;')
    .replace(/\r/g, '&#13;');
}
