// DOM helpers. Everything that comes from the server (run names, event names, messages)
// is inserted as text (textContent / text nodes), never parsed as HTML.

/**
 * Create an element. props: class, text, dataset {}, style {}, on<event> handlers, other
 * attributes (set with setAttribute, values as strings). Children: nodes or strings (text).
 */
export function h(tag, props, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(props || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === "class") el.className = v;
    else if (k === "text") el.textContent = String(v);
    else if (k === "dataset") Object.assign(el.dataset, v);
    else if (k === "style") Object.assign(el.style, v);
    else if (k.startsWith("on") && typeof v === "function") el.addEventListener(k.slice(2), v);
    else el.setAttribute(k, v === true ? "" : String(v));
  }
  append(el, children);
  return el;
}

export function append(el, children) {
  for (const c of children.flat(Infinity)) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

/**
 * `text` as strings and <wbr> elements: a line may break after each match of `separators` (a
 * regular expression with one capturing group), so a long path wraps at its parts instead of
 * overflowing or being split mid-name. The text content is `text`, unchanged.
 */
export function breakable(text, separators = /(::)/) {
  const out = [];
  String(text).split(separators).forEach((part, i) => {
    if (part) out.push(part);
    if (i % 2 === 1) out.push(document.createElement("wbr"));
  });
  return out;
}

export function clear(el) {
  while (el.firstChild) el.removeChild(el.firstChild);
  return el;
}

/** Copy text to the clipboard; falls back to a hidden textarea where the API is refused. */
export async function copyText(text) {
  try {
    await navigator.clipboard.writeText(text);
    return true;
  } catch (_) {
    const ta = h("textarea", { style: { position: "fixed", left: "-9999px" } });
    ta.value = text;
    document.body.append(ta);
    ta.select();
    let ok = false;
    try { ok = document.execCommand("copy"); } catch (_) { ok = false; }
    ta.remove();
    return ok;
  }
}
